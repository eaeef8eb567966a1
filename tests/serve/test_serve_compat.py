"""heed serve speaks LibreTranslate's and DeepL's APIs: the real clients (libretranslatepy, the
official `deepl` package) against `heed serve` listening on loopback, one server of a tiny trained
model of one pair with API keys, one with a tiny NLLB model beside it and none. Each answer is the
translation POST /v1/translate gives for the same sentence; each mistake is answered in the API's
own error shape, never in /v1's."""
from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="heed-nmt[serve] is not installed")
libretranslatepy = pytest.importorskip("libretranslatepy", reason="the dev extra is not installed")
deepl = pytest.importorskip("deepl", reason="the dev extra is not installed")
import httpx
from typer.testing import CliRunner

from heed.cli import app
from heed.data.dates import generate_dates
from heed.serve.compat.languages import name_of, public_codes
from heed.serve.compat.segments import segment

KEY = "sesame-0123"
LIMITS = ["--max-sentences", "8", "--max-chars", "60", "--max-body", "65536"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _live(args: list[str]) -> Iterator[str]:
    """`heed serve ARGS` listening on a free loopback port (uvicorn in a thread of this process);
    yields its URL."""
    import uvicorn

    calls: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uvicorn, "run", lambda app_, **kwargs: calls.update(app=app_, **kwargs))
        done = CliRunner().invoke(app, ["serve", *args, "--device", "cpu", *LIMITS])
    assert done.exit_code == 0, done.output
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(calls["app"], host="127.0.0.1", port=port, http=calls["http"],
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("NO_PROXY", "127.0.0.1")  # the clients honour proxy variables
            patch.setenv("no_proxy", "127.0.0.1")
            yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def keyed(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tiny dates model served as fr-en, with one API key."""
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"# the test's key\n{KEY}\n\n", encoding="utf-8")
    with _live([str(trained_run), "--names", "fr-en", "--api-keys", str(keys)]) as url:
        yield url


@pytest.fixture(scope="module")
def nllb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.pretrained_models import make_m2m100

    from heed.pretrained import import_model

    root = tmp_path_factory.mktemp("nllb")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_dir = make_m2m100(root / "hf", "nllb")
    return import_model(hf_dir, root / "heed")


@pytest.fixture(scope="module")
def open_server(trained_run: Path, nllb_dir: Path) -> Iterator[str]:
    """The tiny dates model as fr-en beside a tiny NLLB model, without keys."""
    with _live([str(trained_run), str(nllb_dir), "--names", "fr-en,nllb"]) as url:
        yield url


@pytest.fixture(scope="module")
def dates() -> list[str]:
    splits = generate_dates(n_train=1, n_dev=1, n_test=6, seed=5, languages=("fr",), verbose_forms=False)
    return [p.src for p in splits.test]


def _v1(url: str, sentences: list[str], **pair: str) -> list[str]:
    """What heed's own API answers for `sentences` (the compat APIs must answer the same)."""
    reply = httpx.post(f"{url}/v1/translate", json={"sentences": sentences, "attention": False, **pair})
    assert reply.status_code == 200, reply.text
    return [r["hypotheses"][0]["text"] for r in reply.json()["results"]]


def _post(url: str, body: Any, *, form: bool = False, **headers: str) -> tuple[int, Any]:
    reply = httpx.post(url, data=body, headers=headers) if form else httpx.post(url, json=body, headers=headers)
    return reply.status_code, reply.json()


# ------------------------------------------------------------------------- LibreTranslate


def test_libretranslatepy_translates_as_heeds_own_api(keyed: str, dates: list[str]) -> None:
    client = libretranslatepy.LibreTranslateAPI(keyed, api_key=KEY)
    assert client.translate(dates[0], "fr", "en") == _v1(keyed, dates[:1])[0]


def test_a_list_of_texts_keeps_its_order_and_paragraphs(keyed: str, dates: list[str]) -> None:
    status, body = _post(f"{keyed}/translate", {"q": dates[:3], "source": "fr", "target": "en", "api_key": KEY})
    assert status == 200, body
    assert body["translatedText"] == _v1(keyed, dates[:3])
    joined = f"{dates[0]}\n\n  {dates[1]}"  # a model reads a line at a time: the breaks are kept around them
    status, body = _post(f"{keyed}/translate", {"q": joined, "source": "fr", "target": "en", "api_key": KEY},
                         form=True)
    first, second = _v1(keyed, dates[:2])
    assert status == 200 and body["translatedText"] == f"{first}\n\n  {second}"


def test_detect_languages_and_settings_of_a_one_pair_model(keyed: str, dates: list[str]) -> None:
    client = libretranslatepy.LibreTranslateAPI(keyed, api_key=KEY)
    assert client.detect(dates[0]) == [{"confidence": 100.0, "language": "fr"}]
    assert client.languages() == [{"code": "fr", "name": "French", "targets": ["en"]}]
    settings = httpx.get(f"{keyed}/frontend/settings").json()
    assert settings["keyRequired"] is True and settings["charLimit"] == 60 * 8
    assert settings["language"]["target"] == {"code": "en", "name": "English"}
    status, body = _post(f"{keyed}/translate", {"q": dates[0], "source": "auto", "target": "en", "api_key": KEY})
    assert status == 200 and body["detectedLanguage"] == {"confidence": 100.0, "language": "fr"}


def test_alternatives_are_the_n_best(keyed: str, dates: list[str]) -> None:
    status, body = _post(f"{keyed}/translate", {"q": dates[0], "source": "fr", "target": "en", "alternatives": 2,
                                                "api_key": KEY})
    assert status == 200, body
    nbest = httpx.post(f"{keyed}/v1/translate", json={"sentences": dates[:1], "n_best": 3, "beam_size": 3,
                                                      "attention": False}).json()
    texts = [h["text"] for h in nbest["results"][0]["hypotheses"]]
    assert body["translatedText"] == texts[0] and body["alternatives"] == [t for t in texts[1:] if t != texts[0]]


def test_a_wrong_or_missing_key_is_the_clients_error(keyed: str, dates: list[str]) -> None:
    with pytest.raises(urllib.error.HTTPError) as wrong:
        libretranslatepy.LibreTranslateAPI(keyed, api_key="not-it").translate(dates[0], "fr", "en")
    assert wrong.value.code == 403 and json.loads(wrong.value.read()) == {"error": "Invalid API key"}
    status, body = _post(f"{keyed}/translate", {"q": dates[0], "source": "fr", "target": "en"})
    assert status == 400 and "API key" in body["error"]


@pytest.mark.parametrize("body, status, words", [
    ({"q": "x", "source": "xx", "target": "en"}, 400, "xx is not supported as a source language"),
    ({"q": "x", "source": "fr", "target": "de"}, 400, "de is not supported as a target language"),
    ({"source": "fr", "target": "en"}, 400, "missing q parameter"),
    ({"q": "x", "source": "fr"}, 400, "missing target parameter"),
    ({"q": "x", "source": "fr", "target": "en", "format": "pdf"}, 400, "pdf format is not supported"),
    ({"q": ["12 mars"] * 9, "source": "fr", "target": "en"}, 413, "q: 9 texts"),
    ({"q": ["Il pleut. Il neige. Il vente."] * 3, "source": "fr", "target": "en"}, 413, "q: 9 sentences"),
    ({"q": [""] * 5000, "source": "fr", "target": "en"}, 413, "q: 5000 texts"),
    ({"q": ["12 mars", "1" * 61], "source": "fr", "target": "en"}, 413, "q[1]: the sentence has 61 characters"),
    ({"q": ["12 mars", 3], "source": "fr", "target": "en"}, 400, "q[1] must be a string"),
    ({"q": "12 mars\x00", "source": "fr", "target": "en"}, 400, "q: "),
])
def test_libretranslate_mistakes_in_its_own_shape(keyed: str, body: dict[str, Any], status: int, words: str) -> None:
    got, answer = _post(f"{keyed}/translate", {**body, "api_key": KEY})
    assert got == status and set(answer) == {"error"} and words in answer["error"], answer


def test_libretranslate_refusals_before_the_route_are_in_its_shape_too(keyed: str) -> None:
    fields = "&".join(f"f{k}=" for k in range(5000))  # thousands of fields, within the body limit
    reply = httpx.post(f"{keyed}/translate", content=fields, headers={"content-type": "application/x-www-form-urlencoded"})
    assert reply.status_code == 413 and set(reply.json()) == {"error"}
    too_big = httpx.post(f"{keyed}/translate", json={"q": "x" * 70000, "source": "fr", "target": "en"})
    assert too_big.status_code == 413 and "--max-body" in too_big.json()["error"]
    wrong_method = httpx.get(f"{keyed}/translate")
    assert wrong_method.status_code == 405 and isinstance(wrong_method.json()["error"], str)
    assert isinstance(httpx.post(f"{keyed}/translate", content=b"{oops",
                                 headers={"content-type": "application/json"}).json()["error"], str)
    multipart = httpx.post(f"{keyed}/translate", files={"q": (None, "12 mars")})
    assert multipart.status_code == 400 and "multipart/form-data" in multipart.json()["error"]
    as_text = httpx.post(f"{keyed}/translate", headers={"content-type": "text/plain"},
                         content=json.dumps({"q": "12 mars", "source": "fr", "target": "en", "api_key": KEY}))
    assert as_text.status_code == 200, as_text.text  # JSON sent as text/plain, as pages do to skip a preflight


def test_tags_in_text_format_are_text(keyed: str) -> None:
    tagged = "<b>12 mars 2021</b>"
    status, body = _post(f"{keyed}/translate", {"q": tagged, "source": "fr", "target": "en", "api_key": KEY})
    assert status == 200 and body["translatedText"] == _v1(keyed, [tagged])[0]


# ----------------------------------------------------------------------------------- DeepL


def test_deepl_client_translates_as_heeds_own_api(keyed: str, dates: list[str]) -> None:
    translator = deepl.Translator(KEY, server_url=keyed)
    one = translator.translate_text(dates[0], source_lang="FR", target_lang="EN-US")
    assert one.text == _v1(keyed, dates[:1])[0] and one.detected_source_lang == "FR"
    many = translator.translate_text(dates[:3], target_lang="EN-GB")  # no source: the one pair's
    assert [r.text for r in many] == _v1(keyed, dates[:3]) and {r.detected_source_lang for r in many} == {"FR"}
    usage = translator.get_usage()
    assert usage.character.valid and usage.character.count >= len(dates[0]) + sum(len(d) for d in dates[:3])
    assert [(lang.code, lang.name) for lang in translator.get_source_languages()] == [("FR", "French")]
    assert [lang.code for lang in translator.get_target_languages()] == ["EN-GB", "EN-US"]


def test_deepl_client_carries_tags(keyed: str, dates: list[str]) -> None:
    pytest.importorskip("heed.markup", reason="heed.markup is not in this tree yet")
    translator = deepl.Translator(KEY, server_url=keyed)
    plain = _v1(keyed, dates[:2])
    out = translator.translate_text(f"<p>{dates[0]}</p><p>{dates[1]}</p>", source_lang="FR", target_lang="EN-US",
                                    tag_handling="xml")
    assert out.text == f"<p>{plain[0]}</p><p>{plain[1]}</p>"  # each block's text through the same path
    kept = translator.translate_text(f"<p>{dates[0]} <code>x = 1</code></p>", source_lang="FR",
                                     target_lang="EN-US", tag_handling="html", ignore_tags=["code"])
    assert "<code>x = 1</code>" in kept.text


def test_libretranslate_html_carries_tags(keyed: str, dates: list[str]) -> None:
    pytest.importorskip("heed.markup", reason="heed.markup is not in this tree yet")
    status, body = _post(f"{keyed}/translate", {"q": [f"<p>{dates[0]}</p>", f"<b>{dates[1]}</b>"], "source": "fr",
                                                "target": "en", "format": "html", "api_key": KEY})
    plain = _v1(keyed, dates[:2])
    assert status == 200 and body["translatedText"][0] == f"<p>{plain[0]}</p>", body
    inline = body["translatedText"][1]  # placed where the tiny model's alignment puts it
    assert re.sub(r"</?b>", "", inline) == plain[1] and inline.count("<b>") == inline.count("</b>") == 1
    status, body = _post(f"{keyed}/translate", {"q": "<p>oops", "source": "fr", "target": "en", "format": "html",
                                                "api_key": KEY})
    assert status in (200, 400) and (status == 200 or set(body) == {"error"})


def test_deepl_wrong_key_and_unknown_language(keyed: str, dates: list[str]) -> None:
    with pytest.raises(deepl.AuthorizationException):
        deepl.Translator("not-it", server_url=keyed).translate_text(dates[0], target_lang="EN-US")
    with pytest.raises(deepl.DeepLException) as unknown:
        deepl.Translator(KEY, server_url=keyed).translate_text(dates[0], target_lang="KO")
    assert unknown.value.http_status_code == 400 and "target_lang" in str(unknown.value)


def test_deepl_mistakes_in_its_own_shape(keyed: str) -> None:
    auth = {"Authorization": f"DeepL-Auth-Key {KEY}"}
    fields = "&".join(f"text={k}" for k in range(5000))
    reply = httpx.post(f"{keyed}/v2/translate", content=fields + "&target_lang=EN-US",
                       headers={**auth, "content-type": "application/x-www-form-urlencoded"})
    assert reply.status_code == 413 and set(reply.json()) == {"message"}
    status, body = _post(f"{keyed}/v2/translate", {"text": ["12 mars"] * 9, "target_lang": "EN-US"}, **auth)
    assert status == 413 and body["message"].startswith("text: 9 texts")
    status, body = _post(f"{keyed}/v2/translate", {"text": ["x"], "target_lang": "EN-US", "tag_handling": "pdf"},
                         **auth)
    assert status == 400 and "tag_handling" in body["message"]
    form = httpx.post(f"{keyed}/v2/translate", data={"text": ["12 mars", "1 avril"], "target_lang": "EN-US"},
                      headers=auth)  # a repeated form field, as older clients send
    assert form.status_code == 200 and len(form.json()["translations"]) == 2
    assert httpx.get(f"{keyed}/v2/usage").status_code == 403
    assert set(httpx.delete(f"{keyed}/v2/usage", headers=auth).json()) == {"message"}
    glossaries = httpx.get(f"{keyed}/v2/glossaries", headers=auth)  # a part of DeepL's API heed has not
    assert glossaries.status_code == 404 and set(glossaries.json()) == {"message"}


# ------------------------------------------------------------------- a many-language model


def test_a_many_language_model_lists_and_translates_its_languages(open_server: str, nllb_dir: Path) -> None:
    languages = {entry["code"]: entry for entry in libretranslatepy.LibreTranslateAPI(open_server).languages()}
    assert languages["fr"]["name"] == "French" and "de" in languages["fr"]["targets"]
    assert "fra_Latn" not in languages and languages["zho_Hant"]["name"] == "Chinese (Traditional)"
    text = "Le chat dort sur le canapé."
    expected = _v1(open_server, [text], model="nllb", src_lang="fra_Latn", tgt_lang="deu_Latn")
    for source in ("fr", "fra_Latn"):  # LibreTranslate's code or the model's own
        status, body = _post(f"{open_server}/translate", {"q": text, "source": source, "target": "de"})
        assert status == 200 and body["translatedText"] == expected[0] and body["model"] == "nllb"
    translator = deepl.Translator("any", server_url=open_server)  # no keys: any key passes
    assert translator.translate_text(text, source_lang="FR", target_lang="DE").text == expected[0]
    # fr -> en: the model of that one pair first
    assert translator.translate_text("12 mars 2021", source_lang="FR", target_lang="EN-US").text == \
        _v1(open_server, ["12 mars 2021"], model="fr-en")[0]


def test_detection_for_a_many_language_model_uses_lingua(open_server: str) -> None:
    pytest.importorskip("lingua", reason="the detect extra is not installed")
    found = libretranslatepy.LibreTranslateAPI(open_server).detect("Bonjour, comment allez-vous aujourd'hui ?")
    assert found[0]["language"] == "fr" and 0 < found[0]["confidence"] <= 100


def test_without_lingua_detection_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from heed.serve.compat.detect import Detector, NoDetector

    monkeypatch.setitem(sys.modules, "lingua", None)
    with pytest.raises(NoDetector, match=r"heed-nmt\[detect\]"):
        Detector(["fr", "en"]).detect("Bonjour")


# ------------------------------------------------------------------------- the small parts


def test_nllb_codes_become_two_letter_codes_where_the_mapping_is_clear() -> None:
    codes = public_codes(["fra_Latn", "zho_Hans", "zho_Hant", "srp_Cyrl", "arb_Arab", "ace_Arab", "ace_Latn"])
    assert codes == {"fr": "fra_Latn", "zh": "zho_Hans", "zho_Hant": "zho_Hant", "sr": "srp_Cyrl",
                     "ar": "arb_Arab", "ace_Arab": "ace_Arab", "ace_Latn": "ace_Latn"}
    assert (name_of("fr"), name_of("zho_Hant"), name_of("ace_Latn")) == ("French", "Chinese (Traditional)",
                                                                       "Acehnese (Latin)")


@pytest.mark.parametrize("text, pieces", [
    ("Hello. How are you?\n\nBye.", ["Hello.", "How are you?", "Bye."]),
    ("  padded  ", ["padded"]),
    ("", []),
    ("a\r\nb", ["a", "b"]),
    ("你好。再见！", ["你好。", "再见！"]),
    ("Le 8 déc. 1927 il neige. Donnerstag, 28. August 2064. SAM. 29 JUIL. 2034",
     ["Le 8 déc. 1927 il neige.", "Donnerstag, 28. August 2064.", "SAM. 29 JUIL. 2034"]),
    ("Il pleut. Etc. and so on! Né en 1999. Puis 1993. 9. 11. Fin", ["Il pleut.", "Etc. and so on!", "Né en 1999.",
                                                                   "Puis 1993. 9. 11. Fin"]),
])
def test_segments_are_sentences_and_joining_puts_the_rest_back(text: str, pieces: list[str]) -> None:
    cut = segment(text)
    assert cut.pieces == pieces and cut.join(cut.pieces) == text
    assert segment(text, sentences=False).pieces == [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("settings, lt_status, deepl_status, words", [
    ({"max_queue": 1}, 429, 429, "busy"),  # two sentences never fit a queue of one
    ({"timeout": 0.001}, 500, 504, "--timeout"),
])
def test_the_queue_and_the_time_limit_in_each_apis_shape(trained_run: Path, settings: dict[str, Any],
                                                         lt_status: int, deepl_status: int, words: str) -> None:
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import ServeSettings, create_app

    translator = Translator.load(trained_run, device="cpu")
    if "timeout" in settings:  # slower than the limit, whatever the machine: two dates can take under 1 ms
        import time

        search = translator.translate_nbest
        translator.translate_nbest = lambda *args, **kwargs: (time.sleep(0.2), search(*args, **kwargs))[1]
    served = create_app({"fr-en": translator}, ServeSettings(**settings))
    with TestClient(served) as client:
        lt = client.post("/translate", json={"q": ["12 mars", "3 avril"], "source": "fr", "target": "en"})
        assert lt.status_code == lt_status and set(lt.json()) == {"error"} and words in lt.json()["error"]
        dl = client.post("/v2/translate", json={"text": ["12 mars", "3 avril"], "target_lang": "EN-US"})
        assert dl.status_code == deepl_status and set(dl.json()) == {"message"} and words in dl.json()["message"]
        if deepl_status == 429:
            assert lt.json()["error"].startswith("Slowdown: ") and int(dl.headers["Retry-After"]) >= 1


def test_without_lingua_detect_is_a_400_naming_the_extra(trained_run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two models of one pair from different languages: only a language identifier can choose."""
    import sys

    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import create_app

    monkeypatch.setitem(sys.modules, "lingua", None)
    model = Translator.load(trained_run, device="cpu")
    with TestClient(create_app({"fr-en": model, "de-en": model})) as client:
        reply = client.post("/detect", data={"q": "Guten Tag"})
        assert reply.status_code == 400 and "heed-nmt[detect]" in reply.json()["error"]
        reply = client.post("/translate", json={"q": "Guten Tag", "source": "auto", "target": "en"})
        assert reply.status_code == 400 and "heed-nmt[detect]" in reply.json()["error"]
        assert client.post("/v2/translate", json={"text": ["x"], "target_lang": "EN-US"}).status_code == 400


def test_a_model_whose_name_spells_no_pair_is_listed_under_its_name(trained_run: Path) -> None:
    from heed.api import Translator
    from heed.serve.compat.languages import Catalog

    catalog = Catalog.of({"dates": Translator.load(trained_run, device="cpu")})
    assert (catalog.sources(), catalog.targets("dates")) == (["dates"], ["dates"])
    assert catalog.route("dates", "dates").served.name == "dates"


def test_a_clients_code_finds_the_models_in_either_spelling_and_a_script_variant_its_script() -> None:
    from types import SimpleNamespace

    from heed.serve.compat.languages import Catalog, served

    nllb = SimpleNamespace(languages=["eng_Latn", "fra_Latn", "por_Latn", "zho_Hans", "zho_Hant"])
    catalog = Catalog([served("nllb", nllb)])  # type: ignore[arg-type]
    assert [catalog.public(code, "target") for code in ("FR", "fra_Latn", "EN-GB", "en-us", "PT-BR", "ZH",
                                                         "ZH-HANS", "zh-Hant", "zho_Hant")] == \
        ["fr", "fr", "en", "en", "pt", "zh", "zh", "zho_Hant", "zho_Hant"]
    route = catalog.route("fr", "zho_Hant")
    assert (route.src_lang, route.tgt_lang) == ("fra_Latn", "zho_Hant")


def test_the_curl_commands_of_docs_clients_md_answer(open_server: str) -> None:
    """Every curl line of docs/clients.md, as written, against a server of the page's two models
    (fr-en, and a many-language model as nllb): each answers 200 with JSON, no error."""
    import shutil
    import subprocess

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    page = (Path(__file__).resolve().parents[2] / "docs" / "clients.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```bash\n(.*?)^```", page, flags=re.MULTILINE | re.DOTALL)
    commands = [c.strip() for b in blocks for c in b.replace("\\\n", " ").splitlines() if c.startswith("curl ")]
    assert len(commands) >= 10
    env = {"PATH": "/usr/bin:/bin", "URL": open_server, "KEY": "any", "NO_PROXY": "127.0.0.1"}
    for command in commands:
        done = subprocess.run(["bash", "-c", command.replace("curl -s", "curl -s -w '\\n%{http_code}'", 1)],
                              check=False, env=env, capture_output=True, text=True, timeout=120)
        body, _, code = done.stdout.rpartition("\n")
        assert done.returncode == 0 and code == "200", (command, done.stdout, done.stderr)
        answer = json.loads(body)
        assert not (isinstance(answer, dict) and ({"error", "message"} & set(answer))), (command, answer)


# ------------------------------------------------------------------------------ CORS

def _served_app(trained_run: Path, *flags: str) -> Any:
    """The app `heed serve MODEL FLAGS` would run (uvicorn.run caught)."""
    import uvicorn

    calls: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(uvicorn, "run", lambda app_, **kwargs: calls.update(app=app_, **kwargs))
        done = CliRunner().invoke(app, ["serve", str(trained_run), "--names", "fr-en", "--device", "cpu", *flags])
    assert done.exit_code == 0, done.output
    return calls["app"]


PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}


def test_any_origin_may_call_the_compat_apis_by_default_but_not_v1(trained_run: Path) -> None:
    """As LibreTranslate: a browser extension's preflight is answered, its POST and even its
    error carry Access-Control-Allow-Origin; heed's own /v1 answers no other origin."""
    from fastapi.testclient import TestClient

    page = {"Origin": "moz-extension://4b9d-twp"}
    with TestClient(_served_app(trained_run)) as client:
        for path in ("/translate", "/detect", "/languages", "/v2/translate"):
            pre = client.options(path, headers={**page, **PREFLIGHT, "Access-Control-Request-Headers":
                                                "content-type,authorization"})
            assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "*", (path, pre.text)
            assert "POST" in pre.headers["access-control-allow-methods"]
            assert "authorization" in pre.headers["access-control-allow-headers"].lower()
        done = client.post("/translate", json={"q": "12 mars", "source": "fr", "target": "en"}, headers=page)
        assert done.status_code == 200 and done.headers["access-control-allow-origin"] == "*"
        wrong = client.post("/translate", json={"q": "12 mars", "source": "fr", "target": "xx"}, headers=page)
        assert wrong.status_code == 400 and set(wrong.json()) == {"error"}
        assert wrong.headers["access-control-allow-origin"] == "*"  # the page can read why
        assert client.get("/languages", headers=page).headers["access-control-allow-origin"] == "*"
        own = client.options("/v1/translate", headers={**page, **PREFLIGHT})
        assert own.status_code == 405 and "access-control-allow-origin" not in own.headers
        answered = client.post("/v1/translate", json={"sentences": ["12 mars"]}, headers=page)
        assert answered.status_code == 200 and "access-control-allow-origin" not in answered.headers


def test_cors_origins_lets_only_the_origins_named_or_none(trained_run: Path) -> None:
    from fastapi.testclient import TestClient

    body = {"q": "12 mars", "source": "fr", "target": "en"}
    with TestClient(_served_app(trained_run, "--cors-origins", "https://app.example/, http://127.0.0.1:5173")) as c:
        for origin in ("https://app.example", "http://127.0.0.1:5173"):
            pre = c.options("/translate", headers={"Origin": origin, **PREFLIGHT})
            assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == origin
            assert c.post("/translate", json=body, headers={"Origin": origin}).headers[
                "access-control-allow-origin"] == origin
        pre = c.options("/translate", headers={"Origin": "https://evil.example", **PREFLIGHT})
        assert pre.status_code == 400 and "access-control-allow-origin" not in pre.headers
        other = c.post("/translate", json=body, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers  # the browser withholds the answer
    with TestClient(_served_app(trained_run, "--cors-origins", "none")) as c:
        pre = c.options("/translate", headers={"Origin": "https://app.example", **PREFLIGHT})
        assert pre.status_code == 405 and set(pre.json()) == {"error"}  # in LibreTranslate's shape
        assert "access-control-allow-origin" not in c.post("/translate", json=body,
                                                           headers={"Origin": "https://app.example"}).headers


@pytest.mark.parametrize("spec, words", [
    ("https://app.example/page", "not an origin"),
    ("app.example", "not an origin"),
    ("*,https://app.example", "* alone"),
])
def test_a_cors_origin_that_is_no_origin_is_one_line(trained_run: Path, spec: str, words: str) -> None:
    done = CliRunner().invoke(app, ["serve", str(trained_run), "--cors-origins", spec])
    assert done.exit_code == 2 and "--cors-origins" in done.output and words in done.output, done.output


# ------------------------------------------------------------------------------ markup inside the limits

def test_markup_counts_its_alignment_pass_in_max_work(trained_run: Path) -> None:
    """A budget that the search of a text fills exactly: the text passes plain, and with a tag it
    is refused before anything runs, in each API's shape, for the alignment pass that carries the tag."""
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.serve.app import ServeSettings, create_app

    model = Translator.load(trained_run, device="cpu")
    with TestClient(create_app({"fr-en": model}, ServeSettings(max_work=1))) as client:
        told = client.post("/v1/translate", json={"sentences": ["12 mars 1999"]}).json()["error"]["message"]
    search = int(re.search(r"asks for ([\d,]+) decoder", told).group(1).replace(",", ""))  # type: ignore[union-attr]
    with TestClient(create_app({"fr-en": model}, ServeSettings(max_work=search))) as client:
        plain = client.post("/translate", json={"q": "12 mars 1999", "source": "fr", "target": "en"})
        assert plain.status_code == 200, plain.text
        marked = client.post("/translate", json={"q": "<b>12</b> mars 1999", "source": "fr", "target": "en",
                                                 "format": "html"})
        assert marked.status_code == 400 and set(marked.json()) == {"error"}, marked.text
        assert "--max-work" in marked.json()["error"] and "alignment pass" in marked.json()["error"]
        dl = client.post("/v2/translate", json={"text": ["<b>12</b> mars 1999"], "target_lang": "EN-US",
                                                "tag_handling": "html"})
        assert dl.status_code == 400 and set(dl.json()) == {"message"} and "--max-work" in dl.json()["message"]
        untagged = client.post("/translate", json={"q": "<p>12 mars 1999</p>", "source": "fr", "target": "en",
                                                   "format": "html"})
        assert untagged.status_code == 200  # a block without inline tags needs no alignment


def test_an_alignment_pass_past_the_timeout_is_cut_in_each_apis_shape(trained_run: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An alignment pass that would never end (each batch checks the deadline and goes on) is
    stopped at --timeout, and the request answered in the API's shape, the translation done."""
    from fastapi.testclient import TestClient

    from heed.api import Translator
    from heed.errors import Abandoned
    from heed.serve.app import ServeSettings, create_app

    stopped: list[float] = []

    def endless(self: Translator, *args: Any, stop: Any = None, **kwargs: Any) -> Any:
        while not stop():
            time.sleep(0.01)
        stopped.append(time.monotonic())
        raise Abandoned()

    monkeypatch.setattr(Translator, "align", endless)
    text = "<b>Le 12 mars.</b> Le 3 avril."  # two sentences in one run: aligned by a forced pass
    with TestClient(create_app({"fr-en": Translator.load(trained_run, device="cpu")}, ServeSettings(timeout=3.0))) \
            as client:
        assert client.post("/translate", json={"q": "12 mars 1999.", "source": "fr", "target": "en"}).status_code == 200
        asked = time.monotonic()
        lt = client.post("/translate", json={"q": text, "source": "fr", "target": "en", "format": "html"})
        assert lt.status_code == 500 and set(lt.json()) == {"error"}, lt.text
        assert "--timeout" in lt.json()["error"] and "markup" in lt.json()["error"]
        for _ in range(200):  # the pass's thread sees the deadline at its next check
            if stopped:
                break
            time.sleep(0.01)
        assert stopped and stopped[-1] - asked < 3.0 + 2.0  # the pass was told to stop at the deadline
        dl = client.post("/v2/translate", json={"text": [text], "target_lang": "EN-US", "tag_handling": "html"})
        assert dl.status_code == 504 and set(dl.json()) == {"message"} and "--timeout" in dl.json()["message"]


def test_markup_is_carried_on_the_batchers_thread_with_other_requests_texts(trained_run: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The alignment pass that carries markup runs where the search runs (the batcher's one worker
    thread, never beside it), and the texts of requests that arrive together share one pass."""
    from concurrent.futures import ThreadPoolExecutor

    from fastapi.testclient import TestClient

    import heed.markup
    from heed.api import Translator
    from heed.serve.app import ServeSettings, create_app

    calls: list[tuple[str, int]] = []
    real = heed.markup.carry_many

    def recorded(translator: Translator, documents: Any, *args: Any, **kwargs: Any) -> list[str]:
        calls.append((threading.current_thread().name, len(documents)))
        time.sleep(0.3)  # the next requests queue meanwhile
        return real(translator, documents, *args, **kwargs)

    monkeypatch.setattr(heed.markup, "carry_many", recorded)
    texts = [f"<b>{d}</b> et <i>{d}</i>" for d in ("12 mars 1999", "3 avril 2001", "5 mai 1950", "1 juin 1901")]
    model = Translator.load(trained_run, device="cpu")
    with TestClient(create_app({"fr-en": model}, ServeSettings(batch_wait_ms=200))) as client:
        def post(text: str) -> Any:
            return client.post("/translate", json={"q": text, "source": "fr", "target": "en", "format": "html"})

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(post, texts))
    assert all(a.status_code == 200 and "<b>" in a.json()["translatedText"] for a in answers), answers
    assert {name for name, _ in calls} == {"heed-batcher"}
    assert sum(n for _, n in calls) == 4 and max(n for _, n in calls) >= 2, calls  # texts of several requests in one pass
