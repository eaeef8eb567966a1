"""`heed serve`: the models over HTTP (heed.serve), and the explorer."""
from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer

from heed.cli.app import THREADS_HELP, F, escape, flags_in_place, friendly_errors, language_options, stderr, with_pair
from heed.cli.decode_flags import BF16_HELP, INT8_HELP
from heed.cli.io import model_names
from heed.errors import HeedError, install_hint

# The server's limits and batching: each a flag, and a heed.serve.app.ServeSettings field of the same
# name (which holds the same bounds; the CLI cannot import it, as FastAPI is an optional extra).
LIMIT_OPTIONS: dict[str, tuple[type, Any]] = {
    'max_sentences': (int, typer.Option(64, "--max-sentences", min=1, help="Sentences per request at most.")),
    'max_chars': (int, typer.Option(1000, "--max-chars", min=1, help="Characters per sentence at most.")),
    'max_body': (int, typer.Option(1 << 20, "--max-body", min=1024, help="Request body bytes at most.")),
    'max_queue': (int, typer.Option(1024, "--max-queue", min=1,
                                      help="Sentences waiting for the decoder at most; past it requests get 503 "
                                           "with Retry-After.")),
    'timeout': (float, typer.Option(30.0, "--timeout", min=0.001, help="Seconds a request may take, waiting "
                                      "included; past it, 504.")),
    'batch_wait_ms': (float, typer.Option(5.0, "--batch-wait-ms", min=0.0,
                                            help="How long to gather concurrent requests into one batch.")),
    'batch_sentences': (int, typer.Option(64, "--batch-sentences", min=1, help="Sentences of one batch at most.")),
    'batching': (bool, typer.Option(True, "--batching/--no-batching",
                                      help="Decode concurrent requests together (off: one request at a time).")),
    'max_beam': (int, typer.Option(64, "--max-beam", min=1, help="Beam size (and samples per sentence) at most.")),
    'max_output': (int, typer.Option(1024, "--max-output", min=1,
                                       help="Output tokens a request may allow a sentence at most: floor(max_len_a * "
                                            "the model's max_src_len + max_len_b), and a forced prefix's tokens.")),
    'max_work': (int, typer.Option(1 << 18, "--max-work", min=1,
                                     help="Decoder rows x steps a request may ask for at most: per sentence, the beam "
                                          "(or samples) times its longest output; a teacher-forced pass its target's "
                                          "tokens, and a reading all its passes (attribution: one per output token "
                                          "and integration point; the logit lens: one per layer; the source share: "
                                          "one per hypothesis). Keeps one costly request from holding the decoder "
                                          "while other clients wait.")),
    'max_weights': (int, typer.Option(1 << 21, "--max-weights", min=1,
                                        help="Attention weights a request may read at most: layers x heads x (target x "
                                             "source, plus source x source and target x target for the self-attention "
                                             "parts read), summed over its sentences: /v1/heads' maps, and every part "
                                             "of every pass of ALTI+, rollout and value norms (the source share, "
                                             "/v1/align's weights).")),
    'max_answer': (int, typer.Option(1 << 22, "--max-answer", min=1,
                                       help="Numbers (and tokens) a request's answer may hold at most, counted before "
                                            "it runs: attention matrices, attributions, the logit lens' lists, head "
                                            "maps (about 10-20 bytes of JSON each).")),
    'slice_work': (int, typer.Option(1 << 12, "--slice-work", min=1,
                                       help="Decoder rows x steps a request is given per turn of the decoder: a "
                                            "costlier request is decoded a slice at a time, with other requests' "
                                            "batches between its slices, so it delays them by a slice, not by "
                                            "itself (the readings: attribution, head maps, the logit lens, ALTI+ "
                                            "and the source share: a sentence a turn).")),
    'read_timeout': (float, typer.Option(10.0, "--read-timeout", min=0.001,
                                           help="Seconds a client may take to send a whole request (headers and body); "
                                                "a slower one is disconnected.")),
}
LIMITS: Any = object()  # the place in a command's signature where limit_options puts the flags


def limit_options(command: F) -> F:
    """Give `command` the LIMIT_OPTIONS flags where its signature has `limits=LIMITS`; the command
    gets them as `limits`: {ServeSettings field: value}."""
    flags = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind, default=option)
             for name, (kind, option) in LIMIT_OPTIONS.items()]
    return flags_in_place(command, "limits", flags, lambda limits: limits)


@friendly_errors
@limit_options
@language_options
def serve(
    models: list[Path] | None = typer.Argument(None, help="Model directories (or training output directories, "
                                                  "or `heed export` directories) to serve."),
    names: str | None = typer.Option(None, "--names", metavar="A,B,...",
                                        help="One name per model for the API (default: directory names)."),
    ensembles: list[str] = typer.Option([], "--ensemble", metavar="NAME=DIR,DIR[,...]",
                                        help="Also serve an ensemble of these models under NAME: each step decodes "
                                             "with the mean of their log-probabilities (as `heed translate A B`); "
                                             "they must share tokenizers and vocabularies (repeatable)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on; 0.0.0.0 opens the server to "
                             "the network (it has no authentication)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="Port (0: any free one)."),
    device: str = typer.Option("auto", "--device", help="auto, cpu or cuda."),
    threads: int | None = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    bf16: bool = typer.Option(False, "--bf16", help=BF16_HELP),
    int8: bool = typer.Option(False, "--int8", help=INT8_HELP),
    limits: dict[str, Any] = LIMITS,  # the LIMIT_OPTIONS flags, here (limit_options)
    log_level: str = typer.Option("info", "--log-level", help="uvicorn's log level: debug, info, warning, error."),
    api_keys: Path | None = typer.Option(None, "--api-keys", metavar="FILE",
                                            help="Keys the LibreTranslate and DeepL APIs ask for, one a line "
                                                 "(LibreTranslate's api_key, DeepL's Authorization: DeepL-Auth-Key); "
                                                 "without it they ask for none. heed's /v1 API asks for none."),
    cors_origins: str = typer.Option("*", "--cors-origins", metavar="ORIGINS",
                                     help="Web pages that may call the LibreTranslate and DeepL APIs from a browser "
                                          "(CORS: browser extensions such as TWP, web apps): * lets any origin, as "
                                          "LibreTranslate does; a list (https://app.example,moz-extension://ID) "
                                          "only those; none, no page of another origin. heed's /v1 API allows "
                                          "none either way."),
    *,
    languages: dict[str, Any],
) -> None:
    """Serve models over HTTP: a JSON API (POST /v1/translate, /v1/align; GET /v1/models, /health; the
    OpenAPI page at /docs), the attention explorer at /, and LibreTranslate's and DeepL's APIs
    (POST /translate, /v2/translate; docs/clients.md).

    Several models load at once, each under its name, so the explorer can put them side by side.
    Concurrent requests are decoded together (dynamic batching); a request breaking a limit gets a JSON
    error naming the field. Needs the serve extra: pip install 'heed-nmt[serve]'."""
    try:
        import uvicorn

        from heed.serve.app import ServeSettings, create_app
        from heed.serve.compat import read_keys
    except ImportError as e:
        raise HeedError(f"heed serve needs FastAPI and uvicorn ({e.name} is missing): {install_hint('serve')}") \
            from None
    from heed.plumbing.runtime import torch_threads
    from heed.serve.slow_clients import read_timeout_protocol

    models = list(models or [])
    groups = parse_ensembles(ensembles)
    if not models and not groups:
        raise HeedError("give a model directory to serve (or --ensemble NAME=DIR,DIR)")
    labels = model_names(models, names) if models else []
    clash = sorted(set(labels) & set(groups))
    if clash:
        raise HeedError(f"--ensemble {clash[0]}: a model is served under that name already; give the ensemble "
                        "another name")
    _check_host(host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        stderr().print(f"[yellow]warning:[/] listening on {escape(host)}: anyone who can reach this machine can "
                        "use the server (it has no authentication); put it behind a proxy you trust",
                        soft_wrap=True)
    settings = ServeSettings(**limits, cors_origins=parse_origins(cors_origins))
    keys = read_keys(api_keys) if api_keys is not None else frozenset()
    with torch_threads(threads):
        translators, metrics = _load_served(dict(zip(labels, models)), groups, languages, device=device, bf16=bf16,
                                            int8=int8)
        priors = recorded_priors(dict(zip(labels, models)))
        reverses = recorded_reverses(dict(zip(labels, models)), translators, languages, device=device, bf16=bf16,
                                     int8=int8)
        app_ = create_app(translators, settings, metrics=metrics, api_keys=keys, priors=priors, reverses=reverses)
        uvicorn.run(app_, host=host, port=port, log_level=log_level, http=read_timeout_protocol(settings.read_timeout))


def _load_served(paths: dict[str, Path], groups: dict[str, list[Path]], languages: dict[str, Any], *, device: str,
                 bf16: bool, int8: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The served translators by name (each model, then each --ensemble; a many-language model with
    the default pair, and a warning where it has none) and each one's last training metrics (an
    ensemble's: None)."""
    from heed.api import Translator
    from heed.checkpoint import find_model_dir
    from heed.export.onnx import exported_dir
    from heed.serve.app import last_metrics, unpaired

    translators = {label: Translator.load(path, device=device, bf16=bf16, int8=int8) for label, path in paths.items()}
    metrics = {label: last_metrics(exported_dir(path) or find_model_dir(path)) for label, path in paths.items()}
    for name, members in groups.items():
        translators[name] = Translator.load(members, device=device, bf16=bf16, int8=int8)
        metrics[name] = None
    # The pair is the default of the many-language models among those served; a request may give another.
    translators = {name: with_pair(t, languages) for name, t in translators.items()}
    for name in unpaired(translators):
        stderr().print(f"[yellow]warning:[/] model {escape(name)} translates between "
                       f"{len(translators[name].languages)} languages and is served without a default pair: "
                       "every request must give src_lang and tgt_lang (the explorer has pickers for them); "
                       "--src-lang and --tgt-lang give a default", soft_wrap=True)
    return translators, metrics


def recorded_priors(paths: dict[str, Path]) -> dict[str, Any]:
    """Per served model directory, the statistical priors it records (heed data priors), read and
    checked once at start: /v1/align's aligner priors/both."""
    from heed.checkpoint import find_model_dir
    from heed.explain.priors import model_priors
    from heed.export.onnx import exported_dir

    found = {}
    for label, path in paths.items():
        if exported_dir(path) is None:
            priors = model_priors(find_model_dir(path))
            if priors is not None:
                found[label] = priors
    return found


def recorded_reverses(paths: dict[str, Path], translators: dict[str, Any], languages: dict[str, Any], *,
                      device: str, bf16: bool, int8: bool) -> dict[str, Any]:
    """Per served model directory one of a pair (heed train --both-directions, heed.pair.json), its
    reverse model loaded as the model is and the recorded join: /v1/align symmetrises with it as
    heed align does. A reverse whose vocabularies are not the model's the other way round is refused
    in one line."""
    from heed.api import Translator
    from heed.checkpoint import find_model_dir
    from heed.explain.align import reverse_mismatch
    from heed.export.onnx import exported_dir
    from heed.train.pair import recorded_reverse

    found = {}
    for label, path in paths.items():
        pair = None if exported_dir(path) is not None else recorded_reverse(find_model_dir(path))
        if pair is None:
            continue
        other, how = pair
        backward = with_pair(Translator.load(other, device=device, bf16=bf16, int8=int8),
                             {"src_lang": languages.get("tgt_lang"), "tgt_lang": languages.get("src_lang")})
        why = reverse_mismatch(translators[label].codec, backward.codec)
        if why is not None:
            raise HeedError(f"{path}: the reverse model its pair records ({other}) is not its other direction: {why}")
        found[label] = (backward, how)
    return found


def parse_origins(spec: str) -> tuple[str, ...]:
    """--cors-origins: "*" -> ("*",); "none" or "" -> (); "A,B" -> ("A", "B"), each an origin as a
    browser sends it (scheme://host[:port], no path); a HeedError naming the flag otherwise."""
    from urllib.parse import urlsplit

    spec = spec.strip()
    if spec.lower() in ("", "none"):
        return ()
    origins = tuple(dict.fromkeys(o.strip().rstrip("/") for o in spec.split(",") if o.strip()))
    if "*" in origins:
        if len(origins) > 1:
            raise HeedError(f"--cors-origins {spec}: * already lets every origin; give * alone or a list of origins")
        return origins
    for origin in origins:
        parts = urlsplit(origin)
        if not parts.scheme or not parts.netloc or parts.path or parts.query or parts.fragment:
            raise HeedError(f"--cors-origins: {origin!r} is not an origin; write it as a browser sends it, "
                            "scheme://host[:port] without a path (https://app.example, moz-extension://ID)")
    return origins


def parse_ensembles(specs: Sequence[str]) -> dict[str, list[Path]]:
    """--ensemble NAME=DIR,DIR,... -> {NAME: [DIR, ...]}; a HeedError naming the spec when malformed."""
    groups: dict[str, list[Path]] = {}
    for spec in specs:
        name, sep, paths = spec.partition("=")
        members = [Path(p.strip()) for p in paths.split(",") if p.strip()]
        if not sep or not name.strip() or len(members) < 2:
            raise HeedError(f"--ensemble {spec!r}: write NAME=DIR,DIR (a name, then two or more model directories)")
        if name.strip() in groups:
            raise HeedError(f"--ensemble {name.strip()}: given twice; give each ensemble its own name")
        groups[name.strip()] = members
    return groups


def _check_host(host: str, port: int) -> None:
    """A HeedError naming --host when it is no address this machine can listen on (uvicorn would
    print "Name or service not known" without saying which name)."""
    import socket

    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as e:
        raise HeedError(f"--host {host}: not an address or host name this machine can listen on ({e})") from None
