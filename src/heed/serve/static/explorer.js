/* heed attention explorer: plain JS + SVG, no framework, no build step, no network but the API.
 *
 * The page talks to the server's JSON API with relative URLs (v1/models, v1/translate), so it
 * works behind a path prefix too. One translation request per view: POST v1/translate with
 * "trace": true returns everything drawn here (n-best, attention, per-step alternatives, beam tree).
 *
 * Layout of this file: small DOM/SVG helpers, the API, the form, the single-model view (output,
 * "what if", heatmap, alignment, n-best, beam tree), the side-by-side view, and start-up.
 */
(function () {
  "use strict";

  const SVG_NS = "http://www.w3.org/2000/svg";
  const EOS = "</s>";
  const ALTERNATIVES = 5; // top tokens per output step shown by "what if"
  const ALIGN_MIN_WEIGHT = 0.05; // thinner links than this are noise and clutter the alignment view
  const SHARE_LOW = 0.5; // a token whose ALTI+ source share is below this came mostly from the output so far
  // Alignment readings that read a Transformer's every attention block ("gives": contributions).
  const CONTRIBUTION_READINGS = ["value_norm", "rollout", "alti"];
  const READING_NAMES = { attention: "attention", value_norm: "value norms", rollout: "rollout", alti: "ALTI+" };
  const ALIGN_STEP_MIN = 12; // px a token at least on the alignment's lines (past that, the view scrolls)
  const ALIGN_STEP_MAX = 90; // px a token at most: a short sentence is not spread across the page
  const CELL_MIN = 14; // px: below this the labels of a 60-token source stop being readable
  const CELL_MAX = 28;
  const EOS_FONT_PX = 10; // </s> is drawn smaller: it is wide, and it is not a word of the sentence
  const LABEL_FONT_PX = 12;

  // Example sources for the generated dates task, keyed by its language codes (config.data.dates).
  const DATE_EXAMPLES = {
    en: "March 3, 1998", fr: "le 3 mars 1998", ko: "1998년 3월 3일",
    de: "3. März 1998", es: "3 de marzo de 1998",
  };

  // Everything the page knows; views are redrawn from here (on resize, on picking a hypothesis).
  const state = {
    models: [], // GET v1/models entries
    seq: 0, // request counter: a response older than the latest request is dropped
    single: null, // {model, request, response, selected, step}
    compare: null, // [{model, response | error}]
    pairs: {}, // a many-language model's name -> {src_lang, tgt_lang} picked: sent with its every request
  };

  // ------------------------------------------------------------------ DOM and SVG helpers

  const $ = (id) => document.getElementById(id);

  /** An HTML element with attributes (on* keys become listeners) and children (strings or nodes). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const child of children.flat()) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(child instanceof Node ? child : String(child));
      }
    }
    return node;
  }

  /** An SVG element, appended to `parent` when one is given. */
  function svg(tag, attrs, parent) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    if (parent) parent.appendChild(node);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
  }

  /** SVG <text> with its content set as text (never as markup: tokens are user data). */
  function svgText(parent, attrs, content) {
    const node = svg("text", attrs, parent);
    node.textContent = content;
    return node;
  }

  const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, x));
  // null: a score the API could not write (-inf: the constraints cut the output short).
  const fixed = (x, digits) => (Number.isFinite(x) ? x.toFixed(digits) : x === null ? "−∞" : String(x));

  /** A probability as a percentage a person can compare: 97.3%, 0.018%, 4.2e-4%. */
  function percent(p) {
    const pct = p * 100;
    if (pct >= 0.1) return `${pct.toFixed(1)}%`;
    if (pct >= 0.001) return `${pct.toFixed(3)}%`;
    return `${pct.toExponential(1)}%`;
  }

  /** The width a string takes in the page's label font: lays out heatmap margins before drawing. */
  const textWidth = (() => {
    let context = null;
    return function (text, px = LABEL_FONT_PX) {
      if (!context) context = document.createElement("canvas").getContext("2d");
      context.font = `${px}px ${getComputedStyle(document.body).fontFamily}`;
      return context.measureText(text).width;
    };
  })();

  /** The width of a token's label (</s> is drawn in a smaller font, see EOS_FONT_PX). */
  function labelWidth(token) {
    return token === EOS ? textWidth(token, EOS_FONT_PX) : textWidth(token);
  }

  /** A token label that fits `maxPx`: long subwords keep their start and an ellipsis. */
  function fitLabel(token, maxPx) {
    if (labelWidth(token) <= maxPx) return token;
    let cut = token;
    while (cut.length > 1 && textWidth(cut + "…") > maxPx) cut = cut.slice(0, -1);
    return cut + "…";
  }

  // Attention colour: a light-to-dark blue ramp (ColorBrewer Blues), linear in the weight, so the
  // eye reads darker = more attention and 0 stays near the page's background.
  const RAMP = [[0, [247, 251, 255]], [0.25, [198, 219, 239]], [0.5, [107, 174, 214]],
    [0.75, [33, 113, 181]], [1, [8, 48, 107]]];

  function weightColor(w) {
    const x = clamp(Number(w) || 0, 0, 1);
    for (let k = 1; k < RAMP.length; k++) {
      const [x1, c1] = RAMP[k];
      const [x0, c0] = RAMP[k - 1];
      if (x <= x1) {
        const t = (x - x0) / (x1 - x0);
        const rgb = c0.map((v, i) => Math.round(v + t * (c1[i] - v)));
        return `rgb(${rgb.join(",")})`;
      }
    }
    return "rgb(8,48,107)";
  }

  // ------------------------------------------------------------------------------- tooltip

  const tooltip = {
    /** Show `lines` near a mouse event or, for keyboard focus, near the element. */
    show(lines, event, target) {
      const box = $("tooltip");
      box.replaceChildren(...lines.map((line, k) => el("div", { class: k ? "tip-line" : "tip-head" }, line)));
      box.hidden = false;
      let x, y;
      if (event && event.clientX !== undefined && event.type.startsWith("mouse")) {
        x = event.clientX + 14;
        y = event.clientY + 16;
      } else {
        const r = (target || event.target).getBoundingClientRect();
        x = r.right + 8;
        y = r.bottom + 8;
      }
      // Keep it inside the window: flip to the other side of the pointer near an edge.
      const w = box.offsetWidth;
      const h = box.offsetHeight;
      if (x + w > window.innerWidth - 8) x = Math.max(8, x - w - 28);
      if (y + h > window.innerHeight - 8) y = Math.max(8, y - h - 32);
      box.style.left = `${x}px`;
      box.style.top = `${y}px`;
    },
    hide() {
      $("tooltip").hidden = true;
    },
  };

  // ----------------------------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(message, status, field) {
      super(message);
      this.status = status;
      this.field = field;
    }
  }

  /** GET or POST JSON; any failure becomes an ApiError with a message for a person. */
  async function api(path, body) {
    if (body && body.model && state.pairs[body.model]) {
      const picked = Object.entries(state.pairs[body.model]).filter(([, code]) => code);
      body = { ...Object.fromEntries(picked), ...body };
    }
    let response;
    try {
      response = await fetch(path, body === undefined ? {} : {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch (e) {
      throw new ApiError("cannot reach the server; is `heed serve` still running?", 0, null);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (e) {
      // A proxy's HTML error page, or an empty body: described below by the status alone.
    }
    if (!response.ok) {
      const error = data && data.error;
      if (error && error.message) throw new ApiError(error.message, error.status || response.status, error.field);
      throw new ApiError(`the server answered ${response.status} ${response.statusText}`.trim(), response.status, null);
    }
    if (data === null) throw new ApiError("the server's answer is not JSON", response.status, null);
    return data;
  }

  // --------------------------------------------------------------------- status and errors

  /** An error replaces what was shown: a result left under it would read as the answer to the
   * request that failed. */
  function showError(message) {
    const box = $("error");
    box.replaceChildren(el("strong", {}, "Error: "), message);
    box.hidden = false;
    showView("none");
    tooltip.hide();
    markRendered();
  }

  function clearError() {
    $("error").hidden = true;
    $("error").replaceChildren();
  }

  /** The text of an ApiError with the request field it names, as the server reports it. */
  function errorText(error) {
    return error.field ? `${error.message} (${error.field})` : error.message;
  }

  /** Count what the page has drawn (a view or an error) in body[data-renders]: a test (or any
   * tool driving the page) waits for it to grow instead of guessing how long a request takes. */
  function markRendered() {
    document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
  }

  function setBusy(busy, text) {
    $("translate").disabled = busy;
    document.body.classList.toggle("busy", busy);
    $("status").textContent = text || "";
  }

  // ---------------------------------------------------------------------------------- form

  const NUMBER_FIELDS = ["beam_size", "n_best", "length_penalty", "min_len", "max_len_a", "max_len_b"];
  const SAMPLING_FIELDS = ["temperature", "top_k", "top_p", "seed"];

  function modelByName(name) {
    return state.models.find((m) => m.name === name) || null;
  }

  /** Whether the model can show `what` (GET /v1/models' "gives": tree, heads, attribution,
   * intervention); a server that does not say is taken at its word that it can. */
  function can(name, what) {
    const model = modelByName(name);
    return !model || !model.gives || model.gives[what] !== false;
  }

  const RUNTIMES = { onnx: "an ONNX export", ctranslate2: "a CTranslate2 export", ensemble: "an ensemble" };

  /** Said in place of what a model cannot show, and why. */
  function cannotNote(name, what) {
    const model = modelByName(name);
    const runs = (model && RUNTIMES[model.runtime]) || "this kind of model";
    const why = {
      tree: `runs in CTranslate2's own search, which keeps no beam tree or step alternatives; the model `
        + "directory or an ONNX export shows them",
      heads: "gives only its averaged attention (the heatmap above); every head of every layer needs the "
        + "model directory",
      attribution: "gives no gradients; attribution needs the model directory",
      intervention: "computes its attention inside its runtime, where it cannot be permuted; the model directory "
        + "can",
      contributions: "has no attention blocks to decompose: value norms, rollout, ALTI+ and the source share need a "
        + "Transformer model directory",
    }[what];
    return el("p", { class: "note cannot", "data-cannot": what }, `Model “${name}” is ${runs}: it ${why}.`);
  }

  /** The decoding options set in the form; a blank field is left to the model's default. */
  function readOptions() {
    const options = {};
    const sampling = $("sampling").checked;
    const fields = sampling ? NUMBER_FIELDS.concat(SAMPLING_FIELDS) : NUMBER_FIELDS;
    for (const name of fields) {
      const input = $(name);
      if (input.value.trim() === "" || input.disabled) continue;
      options[name] = Number(input.value);
    }
    options.sampling = sampling;
    if (sampling) options.beam_size = 1; // sampling draws n_best samples; the server wants beam 1
    return options;
  }

  /** Fill the decoding fields from a model's own decode config. The explorer starts greedy models
   * at beam 5 / 3-best instead: the search tree and the n-best list are much of what it shows. */
  function fillDefaults(model) {
    const d = model.decode || {};
    const set = (name, value) => {
      if (value !== undefined && value !== null) $(name).value = value;
    };
    const beam = d.beam_size > 1 ? d.beam_size : 5;
    set("beam_size", beam);
    set("n_best", d.beam_size > 1 ? d.n_best : Math.min(3, beam));
    for (const name of ["length_penalty", "min_len", "max_len_a", "max_len_b", "temperature", "top_k", "top_p"]) {
      set(name, d[name]);
    }
    $("seed").value = d.seed === null || d.seed === undefined ? "" : d.seed;
    $("sampling").checked = Boolean(d.sampling);
    syncSampling();
  }

  function syncSampling() {
    const on = $("sampling").checked;
    for (const name of SAMPLING_FIELDS) $(name).disabled = !on;
    $("beam_size").disabled = on;
    document.querySelectorAll(".sampling-only").forEach((node) => node.classList.toggle("off", !on));
  }

  function describeModel(model) {
    if (!model) return "";
    const parts = [
      `${model.attention === "none" ? "no" : model.attention} attention`,
      `${Number(model.parameters).toLocaleString("en-US")} parameters`,
      `vocab ${model.src_vocab} → ${model.tgt_vocab}`,
    ];
    const dev = model.metrics && model.metrics.dev;
    if (dev) {
      if (typeof dev.bleu === "number") parts.push(`dev BLEU ${dev.bleu.toFixed(1)}`);
      if (typeof dev.exact_match === "number") parts.push(`exact ${dev.exact_match.toFixed(1)}%`);
    }
    return parts.join(" · ");
  }

  function showModelInfo() {
    syncPermute();
    const model = modelByName($("model").value);
    $("model-info").textContent = model ? describeModel(model) : "";
    renderExamples(model);
    renderLanguages(model);
  }

  /** The pair a many-language model starts with: the one it is served with (its config's
   * data.src_lang and data.tgt_lang), else none chosen yet. */
  function defaultPair(model) {
    const data = (model.config && model.config.data) || {};
    return { src_lang: data.src_lang || "", tgt_lang: data.tgt_lang || "" };
  }

  /** The language pickers: shown for a many-language model (GET /v1/models' languages), filled
   * with its codes; the pair picked goes with every request to it (api()). */
  function renderLanguages(model) {
    const languages = (model && model.languages) || [];
    $("languages").hidden = languages.length === 0 || $("compare-toggle").checked;
    if (!languages.length) return;
    if (!state.pairs[model.name]) state.pairs[model.name] = defaultPair(model);
    const pair = state.pairs[model.name];
    for (const side of ["src_lang", "tgt_lang"]) {
      const choose = el("option", { value: "", disabled: true }, side === "src_lang" ? "from…" : "to…");
      $(side).replaceChildren(choose, ...languages.map((code) => el("option", { value: code }, code)));
      $(side).value = pair[side];
    }
  }

  function pickLanguage() {
    const model = modelByName($("model").value);
    if (!model) return;
    state.pairs[model.name] = { src_lang: $("src_lang").value, tgt_lang: $("tgt_lang").value };
    if ($("sentence").value.trim() && $("src_lang").value && $("tgt_lang").value) submit();
  }

  /** Example sentences for the generated dates task (the demo model); none for other models. */
  function renderExamples(model) {
    const box = $("examples");
    const data = model && model.config && model.config.data;
    const languages = data && data.task === "dates" && data.dates ? data.dates.languages || [] : [];
    const examples = languages.map((code) => DATE_EXAMPLES[code]).filter(Boolean);
    box.hidden = examples.length === 0;
    box.replaceChildren(...(examples.length ? [el("span", { class: "hint" }, "Try:")] : []),
      ...examples.map((text) => el("button", {
        type: "button", class: "example",
        onclick: () => {
          $("sentence").value = text;
          submit();
        },
      }, text)));
  }

  function renderCompareChoices() {
    const toggle = $("compare-toggle");
    const enough = state.models.length >= 2;
    toggle.disabled = !enough;
    $("compare-hint").textContent = enough ? "" : "load two or more models (heed serve A B) to compare them";
    $("compare-models").replaceChildren(...state.models.map((m) => el("label", { class: "chip" },
      el("input", { type: "checkbox", value: m.name, checked: true, onchange: () => toggle.checked && submit() }),
      ` ${m.name}`)));
    $("compare-models").hidden = !(enough && toggle.checked);
  }

  function chosenCompareModels() {
    return Array.from($("compare-models").querySelectorAll("input:checked")).map((input) => input.value);
  }

  /** The form's submit (button, Enter in any field, an example): a fresh translation, no prefix. */
  function submit() {
    clearError();
    const sentence = $("sentence").value;
    if (!sentence.trim()) {
      showError("type a sentence to translate");
      $("sentence").focus();
      return;
    }
    if ($("compare-toggle").checked) translateCompare(sentence, readOptions());
    else translateSingle($("model").value, sentence, readOptions(), null);
  }

  /** The request for one model: only what it can give (a CTranslate2 export traces no search, an
   * export's attention cannot be permuted). */
  function translateBody(model, sentence, options, prefix) {
    const body = { model, sentences: [sentence], ...options };
    if (can(model, "tree")) Object.assign(body, { trace: true, alternatives: ALTERNATIVES });
    if (prefix) body.prefix = [prefix];
    if ($("permute").checked && can(model, "intervention")) body.intervention = "permute";
    else delete body.intervention;
    if (can(model, "contributions")) body.explain = ["source_share"];
    return body;
  }

  /** The permuted-attention toggle is for models whose attention heed computes. */
  function syncPermute() {
    const name = $("compare-toggle").checked ? null : $("model").value;
    const able = name === null || can(name, "intervention");
    $("permute").disabled = !able;
    if (state.permuteHint === undefined) state.permuteHint = $("permute-hint").textContent;
    $("permute-hint").textContent = able ? state.permuteHint : cannotNote(name, "intervention").textContent;
  }

  // --------------------------------------------------------------------- single-model view

  async function translateSingle(model, sentence, options, prefix) {
    const seq = ++state.seq;
    const request = translateBody(model, sentence, options, prefix);
    setBusy(true, "Translating…");
    const started = performance.now();
    try {
      const response = await api("v1/translate", request);
      if (seq !== state.seq) return; // a newer request has been sent since
      state.single = { model, request, response, selected: 0, step: null, ms: performance.now() - started };
      state.compare = null;
      clearError();
      renderSingle();
    } catch (error) {
      if (seq !== state.seq) return;
      showError(errorText(error));
    } finally {
      if (seq === state.seq) setBusy(false, "");
    }
  }

  /** "What if": translate the same sentence again, forcing the output to start with `prefix`. */
  function forcePrefix(prefix) {
    const { model, request, response } = state.single;
    const options = {};
    for (const key of Object.keys(request)) {
      if (!["model", "sentences", "prefix", "trace", "alternatives", "explain"].includes(key)) options[key] = request[key];
    }
    // Sampling: draw with the seed the shown sample used, so the forced token is the only change.
    if (options.sampling && response.decode && response.decode.seed !== null) options.seed = response.decode.seed;
    translateSingle(model, request.sentences[0], options, prefix && prefix.length ? prefix : null);
  }

  function showView(name) {
    $("single-view").hidden = name !== "single";
    $("compare-view").hidden = name !== "compare";
    $("empty").hidden = name !== "empty";
  }

  function renderSingle() {
    const s = state.single;
    const result = s.response.results[0];
    showView("single");
    tooltip.hide();
    renderOutput(s, result);
    renderAlternatives(s, result);
    const hypothesis = result.hypotheses[s.selected];
    const heatmapBox = $("heatmap");
    const alignmentBox = $("alignment");
    if (hypothesis.attention) {
      // The heatmap and the alignment view highlight each other's rows: each calls the other's
      // highlight(), filled in once both exist.
      const linked = { heatmap: null, alignment: null };
      linked.heatmap = renderHeatmap(heatmapBox, result.src_tokens, hypothesis, {
        forced: prefixLength(s), clickable: s.selected === 0 && Boolean(result.steps),
        activeRow: s.selected === 0 ? s.step : null, onPick: (j) => pickStep(j),
        onRow: (j) => linked.alignment.highlight(j), onLeave: () => linked.alignment.highlight(null),
      });
      syncReading(s.model);
      if ($("reading").value === "tokens") {
        linked.alignment = renderAlignmentView(alignmentBox, result.src_tokens, hypothesis, {
          onRow: (j) => linked.heatmap.highlight(j), onLeave: () => linked.heatmap.highlight(null),
        });
        $("alignment-meta").textContent = "line width = attention weight";
        renderWordLinks($("word-links"), hypothesis.alignment);
        document.body.dataset.alignmentReading = "tokens";
      } else {
        linked.alignment = { highlight: () => {} }; // words, not the heatmap's tokens: nothing to point at
        renderWordReading(s, result, hypothesis);
      }
    } else {
      const note = noAttentionNote(s.model);
      heatmapBox.replaceChildren(note);
      alignmentBox.replaceChildren(note.cloneNode(true));
      renderWordLinks($("word-links"), hypothesis.alignment);
    }
    renderHeads(s, result, hypothesis);
    renderAttribution(s);
    renderNbest($("nbest"), result, s.selected, (k) => selectHypothesis(k));
    if (can(s.model, "tree")) renderBeamTree($("beam"), result, s.selected, (k) => selectHypothesis(k));
    else $("beam").replaceChildren(cannotNote(s.model, "tree"));
    markRendered();
  }

  // ------------------------------------------------------------------ alignment readings

  /** The reading picker offers what the model can give; a reading it cannot give falls back to tokens. */
  function syncReading(name) {
    const able = can(name, "contributions");
    for (const option of $("reading").options) {
      option.disabled = CONTRIBUTION_READINGS.includes(option.value) && !able;
      option.title = option.disabled ? cannotNote(name, "contributions").textContent : "";
    }
    if ($("reading").selectedOptions[0].disabled) $("reading").value = "tokens";
    $("align-method").disabled = $("reading").value === "tokens";
  }

  /** The alignment read another way (heed align --weights/--method): v1/align on the shown hypothesis's
   * text, between whitespace words (or target characters, for a model that writes characters), drawn
   * with the links it gives. */
  async function renderWordReading(s, result, hypothesis) {
    const weights = $("reading").value;
    const method = $("align-method").value;
    const box = $("alignment");
    // A model that writes characters is read in characters: a date is one whitespace word.
    const model = modelByName(s.model);
    const tokenizer = model && model.config && model.config.data && model.config.data.tokenizer;
    const units = tokenizer && tokenizer.tgt && tokenizer.tgt.kind === "char" ? "chars" : "words";
    const key = `${s.model}\u0000${result.source}\u0000${hypothesis.text}\u0000${weights}\u0000${method}`;
    s.readings = s.readings || {};
    let words = s.readings[key];
    if (!words) {
      const seq = state.seq;
      try {
        const data = await api("v1/align", { model: s.model, sources: [result.source], targets: [hypothesis.text],
          weights, method, tgt_units: units });
        if (seq !== state.seq || state.single !== s) return;
        words = data.results[0];
        s.readings[key] = words;
      } catch (error) {
        showError(errorText(error));
        return;
      }
    }
    if ($("reading").value !== weights || $("align-method").value !== method) return; // picked again since
    // The unit matrix has no </s>: the view draws one on each side, with no links.
    const targets = units === "chars" ? [...words.tgt_words.join("")] : words.tgt_words;
    const padded = words.attention.map((row) => row.concat([0])).concat([words.src_words.map(() => 0).concat([0])]);
    renderAlignmentView(box, words.src_words, { tokens: targets, attention: padded }, {});
    renderWordLinks($("word-links"), { ...words, tgt_words: targets });
    $("alignment-meta").textContent = `${READING_NAMES[weights]}, ${method === "shift" ? "shift-att" : "argmax"}: `
      + `line width = the source word's share of the row; rows: target ${units === "chars" ? "characters" : "words"}`;
    document.body.dataset.alignmentReading = `${weights}:${method}`;
  }

  // ------------------------------------------------------------------ every head, attribution

  /** A small map's cell in px: 60 source tokens make a 180 px map, a short sentence's cells grow to 8 px. */
  const headCellPx = (cols) => clamp(Math.floor(160 / cols), 3, 8);

  /** Every head of every layer of the shown hypothesis (a Transformer's; an RNN has one attention,
   * which the heatmap above shows). The maps come from v1/heads, once per hypothesis shown. */
  async function renderHeads(s, result, hypothesis) {
    const card = $("heads-card");
    const model = modelByName(s.model);
    card.hidden = !(model && model.family === "transformer" && hypothesis.attention);
    if (card.hidden) return;
    if (!can(s.model, "heads")) {
      $("heads-tokens").replaceChildren();
      $("head-zoom").hidden = true;
      $("heads-grid").replaceChildren(cannotNote(s.model, "heads"));
      return;
    }
    const key = `${s.model}\u0000${result.source}\u0000${hypothesis.tokens.join("\u0001")}`;
    if (s.heads && s.heads.key === key) return drawHeads(s.heads);
    const seq = state.seq;
    try {
      const data = await api("v1/heads", { model: s.model, sources: [result.source], targets: [hypothesis.tokens] });
      if (seq !== state.seq || state.single !== s) return;
      s.heads = { key, maps: data.results[0], zoom: null };
      drawHeads(s.heads);
    } catch (error) {
      showError(errorText(error));
    }
  }

  function meanOf(matrices) {
    return matrices[0].map((row, j) => row.map((_, i) => matrices.reduce((sum, m) => sum + m[j][i], 0)
      / matrices.length));
  }

  /** The grid: one small map per (layer, head), a column of each layer's head mean, a row of the
   * mean over layers (each only where there is more than one to average: a 1-layer model's mean
   * over layers is its layer again); [layer, head] with "mean" for a mean. */
  function headMatrix(cross, layer, head) {
    const layers = layer === "mean" ? cross : [cross[layer]];
    const perLayer = layers.map((heads) => (head === "mean" ? meanOf(heads) : heads[head]));
    return perLayer.length === 1 ? perLayer[0] : meanOf(perLayer);
  }

  function drawMiniMap(matrix, title, attrs) {
    const rows = matrix.length;
    const cols = matrix[0].length;
    const px = headCellPx(cols);
    const canvas = el("canvas", { width: cols, height: rows, class: "mini-map" });
    canvas.style.width = `${cols * px}px`;
    canvas.style.height = `${rows * px}px`;
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(cols, rows);
    matrix.forEach((row, j) => row.forEach((w, i) => {
      const [r, g, b] = weightColor(w).match(/\d+/g).map(Number);
      image.data.set([r, g, b, 255], 4 * (j * cols + i));
    }));
    ctx.putImageData(image, 0, 0);
    const mark = el("div", { class: "mini-mark", hidden: "", "data-cell": String(px) });
    mark.style.width = `${px}px`;
    const button = el("button", { type: "button", class: "mini", title, "aria-label": `enlarge ${title}`, ...attrs },
      el("span", { class: "mini-title" }, title), el("span", { class: "mini-frame" }, canvas, mark));
    return button;
  }

  function drawHeads(h) {
    const cross = h.maps.cross;
    const layers = cross.length;
    const heads = cross[0].length;
    const withMean = (n) => (n > 1 ? [...Array(n).keys(), "mean"] : [...Array(n).keys()]);
    const grid = el("div", { class: "heads-table", role: "grid" });
    grid.style.gridTemplateColumns = `repeat(${withMean(heads).length}, max-content)`;
    const cells = [];
    for (const layer of withMean(layers)) {
      for (const head of withMean(heads)) {
        const title = `${layer === "mean" ? "all layers" : `layer ${layer}`} · ${head === "mean" ? "mean" : `head ${head}`}`;
        const button = drawMiniMap(headMatrix(cross, layer, head), title,
          { "data-layer": String(layer), "data-head": String(head) });
        button.classList.toggle("picked", Boolean(h.zoom && h.zoom[0] === layer && h.zoom[1] === head));
        button.addEventListener("click", () => {
          h.zoom = [layer, head];
          drawHeads(h);
        });
        cells.push(button);
        grid.append(button);
      }
    }
    $("heads-grid").replaceChildren(grid);
    const cols = h.maps.src_tokens.concat([EOS]);
    const strip = cols.map((token, i) => {
      const chip = el("span", { class: "head-token", "data-src-index": String(i), tabindex: "0" }, token);
      const on = () => markColumn(cells, i);
      chip.addEventListener("mouseenter", on);
      chip.addEventListener("focus", on);
      chip.addEventListener("mouseleave", () => markColumn(cells, null));
      chip.addEventListener("blur", () => markColumn(cells, null));
      return chip;
    });
    $("heads-tokens").replaceChildren(...strip);
    const zoom = $("head-zoom");
    zoom.hidden = !h.zoom;
    if (h.zoom) {
      const [layer, head] = h.zoom;
      $("head-zoom-title").textContent = `${layer === "mean" ? "all layers" : `layer ${layer}`} · `
        + `${head === "mean" ? "mean of the heads" : `head ${head}`}`;
      const matrix = headMatrix(cross, layer, head);
      renderHeatmap($("head-zoom-map"), h.maps.src_tokens, { tokens: h.maps.tgt_tokens, attention: matrix }, {
        forced: 0, clickable: false, activeRow: null,
      });
      $("head-zoom-map").dataset.layer = String(layer);
      $("head-zoom-map").dataset.head = String(head);
    }
    document.body.dataset.heads = String(Number(document.body.dataset.heads || 0) + 1);
  }

  /** Outline source column i (null: none) in every small map. */
  function markColumn(cells, i) {
    for (const cell of cells) {
      const mark = cell.querySelector(".mini-mark");
      mark.hidden = i === null;
      if (i !== null) mark.style.left = `${i * Number(mark.dataset.cell)}px`;
    }
  }

  function renderAttribution(s) {
    const box = $("attribution");
    const shown = s.attribution && s.attribution.selected === s.selected ? s.attribution : null;
    const able = can(s.model, "attribution");
    $("attribute").disabled = !modelByName(s.model) || !able || s.busyAttribution === true;
    if (!able) {
      box.replaceChildren(cannotNote(s.model, "attribution"));
      return;
    }
    if (!shown) {
      box.replaceChildren();
      return;
    }
    const a = shown.data;
    const magnitude = a.source.map((row) => row.map(Math.abs));
    const scaled = magnitude.map((row) => {
      const top = Math.max(...row, 1e-12);
      return row.map((x) => x / top);
    });
    const left = el("div", { class: "attribution-panel" }, el("h3", {}, "attention"));
    const method = a.method === "grad_x_input" ? "gradient × input" : "integrated gradients";
    const right = el("div", { class: "attribution-panel" }, el("h3", {}, `|${method}| (row max = 1)`));
    const leftMap = el("div", { id: "attribution-attention" });
    const rightMap = el("div", { id: "attribution-map" });
    left.append(leftMap);
    right.append(rightMap);
    const rho = el("ol", { class: "agreement", "aria-label": "rank correlation per output token" },
      ...a.tgt_tokens.concat([EOS]).map((token, j) => el("li", { "data-row": String(j) },
        el("span", { class: "rho-token" }, token), el("span", { class: "rho" }, `ρ ${fixed(a.agreement[j], 2)}`))));
    const right2 = el("div", { class: "attribution-panel" }, el("h3", {}, "agreement"), rho);
    box.replaceChildren(el("div", { class: "attribution-row" }, left, right, right2));
    const hypothesis = { tokens: a.tgt_tokens, attention: a.attention };
    renderHeatmap(leftMap, a.src_tokens, hypothesis, { forced: 0, clickable: false, activeRow: null });
    renderHeatmap(rightMap, a.src_tokens, { tokens: a.tgt_tokens, attention: scaled },
      { forced: 0, clickable: false, activeRow: null, legend: "|attribution| / row max" });
    document.body.dataset.attributions = String(Number(document.body.dataset.attributions || 0) + 1);
  }

  async function attributeShown() {
    const s = state.single;
    if (!s) return;
    const result = s.response.results[0];
    const hypothesis = result.hypotheses[s.selected];
    s.busyAttribution = true;
    setBusy(true, "Attributing…");
    try {
      const data = await api("v1/attribute", { model: s.model, sentences: [result.source],
        targets: [hypothesis.tokens] });
      if (state.single !== s) return;
      s.attribution = { selected: s.selected, data: data.attributions[0] };
      clearError();
    } catch (error) {
      showError(errorText(error));
    } finally {
      s.busyAttribution = false;
      setBusy(false, "");
      if (state.single === s) renderAttribution(s);
    }
  }

  function noAttentionNote(modelName) {
    return el("p", { class: "note no-attention" },
      `Model “${modelName}” has no attention (a plain encoder-decoder), so there is no heatmap or `
      + "alignment to show.");
  }

  function prefixLength(s) {
    return s.request.prefix ? s.request.prefix[0].length : 0;
  }

  function selectHypothesis(k) {
    state.single.selected = k;
    state.single.step = null;
    renderSingle();
  }

  /** Open the alternatives of output step j (of the best hypothesis). */
  function pickStep(j) {
    const s = state.single;
    s.step = s.step === j ? null : j; // a second click on the same token closes them
    if (s.selected !== 0) s.selected = 0; // alternatives are for the best hypothesis
    renderSingle();
    const focus = document.querySelector(`#output [data-token-index="${j}"]`);
    if (focus) focus.focus({ preventScroll: true });
  }

  /** The Translation card: the hypothesis selected in the n-best list (#1 unless another is picked).
   * "What if" works on #1, whose step alternatives the server traced. */
  function renderOutput(s, result) {
    const best = result.hypotheses[s.selected];
    const forced = prefixLength(s);
    const canPick = Boolean(result.steps) && s.selected === 0;
    const tokens = best.tokens.concat([EOS]);
    const share = best.source_share; // ALTI+ per token, when the model gives it
    const low = (j) => share && share.per_token[j] < SHARE_LOW;
    const chips = tokens.map((token, j) => el("button", {
      type: "button",
      class: ["tok", j < forced ? "forced" : "", j === best.tokens.length ? "eos" : "", s.step === j ? "active" : "",
        low(j) ? "from-prefix" : ""].filter(Boolean).join(" "),
      "data-token-index": j,
      "data-source-share": share ? String(share.per_token[j]) : null,
      "aria-pressed": s.step === j ? "true" : "false",
      title: [canPick ? "what if: see the other tokens the model considered here" : null,
        share ? `source share ${percent(share.per_token[j])}${low(j) ? ": made mostly from the output so far" : ""}`
          : null].filter(Boolean).join(" · ") || null,
      disabled: !canPick,
      onclick: () => pickStep(j),
    }, token));
    const marked = share ? tokens.filter((_, j) => low(j)).length : 0;
    $("output-title").textContent = s.selected === 0 ? "Translation" : `Translation · n-best #${s.selected + 1}`;
    $("output").replaceChildren(...[
      el("div", { class: "output-text" }, best.text),
      best.text === "" ? el("span", { class: "hint" }, "(the output is empty)") : null,
      el("div", { class: "tokens", role: "group", "aria-label": "output tokens; click one for alternatives" }, chips),
      canPick && s.step === null
        ? el("div", { class: "hint" }, "What if? Click a token to see what else the model considered there.") : null,
      s.selected !== 0 && result.steps
        ? el("div", { class: "hint" }, "What if works on #1: pick it in the n-best list.") : null,
      marked ? el("div", { class: "hint share-note" }, `${marked} dashed token${marked === 1 ? " was" : "s were"} `
        + `made mostly from the output so far, not the source (ALTI+ source share under ${percent(SHARE_LOW)}).`)
        : null,
    ].filter(Boolean));
    const decode = s.response.decode || {};
    const meta = [`score ${fixed(best.score, 4)}`, `log p ${fixed(best.log_prob, 4)}`,
      `${best.tokens.length} tokens`, decode.sampling ? `sampling, seed ${decode.seed}` : `beam ${decode.beam_size}`,
      `${Math.round(s.ms)} ms`];
    if (share) meta.push(`source share ${percent(share.sentence)}`);
    if (result.truncated) meta.push(`${result.truncated} source tokens dropped (too long)`);
    $("output-meta").textContent = meta.join(" · ");

    const note = $("prefix-note");
    note.hidden = forced === 0;
    if (forced) {
      note.replaceChildren(el("span", { class: "forced-swatch", "aria-hidden": "true" }),
        `Forced prefix: `, el("code", {}, s.request.prefix[0].join(" ")),
        " — the search continued from there. ",
        el("button", { type: "button", class: "link", id: "clear-prefix", onclick: () => forcePrefix(null) },
          "Clear the prefix"));
    }
  }

  /** The "what if" box: the model's top tokens at the open step, each one click from a re-translation. */
  function renderAlternatives(s, result) {
    const box = $("alternatives");
    const j = s.step;
    if (j === null || !result.steps || !result.steps[j]) {
      box.hidden = true;
      box.replaceChildren();
      return;
    }
    const best = result.hypotheses[0];
    const current = j < best.tokens.length ? best.tokens[j] : EOS;
    const before = best.tokens.slice(0, j);
    const items = result.steps[j].map(({ token, log_prob: logProb }) => {
      const p = Math.exp(logProb);
      const isCurrent = token === current;
      // </s> cannot be forced (a prefix holds target tokens only); the current token changes nothing.
      const disabled = isCurrent || token === EOS;
      const why = isCurrent ? "the model's choice"
        : token === EOS ? "ending here cannot be forced" : "force this token";
      return el("li", {},
        el("button", {
          type: "button", class: `alt${isCurrent ? " current" : ""}`, "data-alt-token": token,
          disabled, title: why, onclick: () => forcePrefix(before.concat([token])),
        },
        el("span", { class: "alt-token" }, token),
        el("span", { class: "alt-bar", "aria-hidden": "true" },
          el("span", { style: `width:${(p * 100).toFixed(1)}%` })),
        el("span", { class: "alt-p" }, percent(p))));
    });
    box.replaceChildren(
      el("div", { class: "alt-head" },
        el("strong", {}, `What if, at position ${j + 1}`),
        ` the model chose “${current}”${before.length ? ` after “${before.join(" ")}”` : ""}.`,
        ` Its top ${items.length}: `,
        el("span", { class: "hint" }, "pick one to force it and translate again")),
      el("ol", { class: "alt-list" }, items));
    box.hidden = false;
  }

  // ------------------------------------------------------------------------------ heatmap

  const LABEL_ANGLE = 60; // degrees: rotated source labels rise to the right
  const LABEL_MAX_PX = 110; // longer source labels are cut with an ellipsis

  /**
   * Sizes of a heatmap of `rows` x `cols` labels in a box `boxWidth` wide: cells fill the box
   * between CELL_MIN and CELL_MAX (past that, the box scrolls). Source labels are rotated once one
   * is wider than a column (words, subwords); single characters stay upright, the most readable,
   * and </s> alone turns if it must.
   */
  function heatmapLayout(rows, cols, boxWidth) {
    const rowLabelW = Math.ceil(Math.max(...rows.map(labelWidth))) + 22;
    const available = Math.max(boxWidth, 240) - rowLabelW - 12;
    const cell = clamp(Math.floor(available / cols.length), CELL_MIN, CELL_MAX);
    const fits = (token) => labelWidth(token) <= cell - 2;
    const allTurn = !cols.slice(0, -1).every(fits);
    const turned = (token) => allTurn || !fits(token);
    const longest = Math.min(Math.max(0, ...cols.filter(turned).map(labelWidth)), LABEL_MAX_PX);
    const radians = LABEL_ANGLE * Math.PI / 180;
    const top = Math.max(24, Math.ceil(longest * Math.sin(radians)) + 18);
    const right = Math.ceil(longest * Math.cos(radians)) + 8;
    return {
      rowLabelW, cell, top, turned,
      width: rowLabelW + cols.length * cell + right,
      height: top + rows.length * cell + 40, // + the colour legend
      x: (i) => rowLabelW + i * cell, // left edge of column i
      y: (j) => top + j * cell, // top edge of row j
    };
  }

  /**
   * Draw one hypothesis' attention as an SVG grid into `box`: rows = output tokens + </s>, columns
   * = source tokens + </s>. Returns {highlight(j | null)} for views linked to it.
   * opts: forced (rows of the forced prefix), clickable (rows open "what if"), activeRow,
   *       onPick(j), onRow(j), onLeave(), legend (what a cell's 0..1 is; default: attention weight).
   */
  function renderHeatmap(box, srcTokens, hypothesis, opts) {
    const weights = hypothesis.attention;
    const cols = srcTokens.concat([EOS]);
    const rows = hypothesis.tokens.concat([EOS]);
    const layout = heatmapLayout(rows, cols, box.clientWidth);
    const { width, height, cell } = layout;
    const root = svg("svg", {
      class: "heatmap-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `attention of ${rows.length} output tokens over ${cols.length} source tokens`,
    });
    const srcLabels = drawSourceLabels(root, cols, layout);
    const outLabels = drawOutputLabels(root, rows, layout, opts);
    drawCells(root, weights, rows.length, cols.length, layout);
    const marks = {
      row: svg("rect", { class: "row-outline", x: layout.rowLabelW - 1.5, width: cols.length * cell + 2,
        height: cell + 2, rx: 2, visibility: "hidden" }, root),
      cell: svg("rect", { class: "cell-mark", width: cell + 1, height: cell + 1, visibility: "hidden" }, root),
    };
    drawColorLegend(root, layout.rowLabelW, layout.y(rows.length) + 12, Math.min(160, cols.length * cell),
      opts.legend || "attention weight");

    /** Outline row j and give each source label a background as opaque as j's weight on it. */
    function highlight(j) {
      const on = j !== null && j !== undefined;
      outLabels.forEach((g, k) => g.classList.toggle("hl", k === j));
      marks.row.setAttribute("visibility", on ? "visible" : "hidden");
      if (on) marks.row.setAttribute("y", layout.y(j) - 1.5);
      srcLabels.forEach(({ g, bg }, i) => {
        const w = on ? weights[j][i] : null;
        if (on) g.setAttribute("data-highlight", String(w));
        else g.removeAttribute("data-highlight");
        g.classList.toggle("strong", on && w >= 0.1); // bold where the row really looks
        bg.style.fillOpacity = on ? String(clamp(w, 0, 1)) : "";
      });
    }

    bindHeatmapEvents(root, { weights, rows, cols, marks, highlight, opts });
    box.replaceChildren(root);
    return { highlight };
  }

  /** Source labels along the top; each has a background rect that a highlighted row fills. */
  function drawSourceLabels(root, cols, layout) {
    return cols.map((token, i) => {
      const x = layout.x(i) + layout.cell / 2;
      const turn = layout.turned(token);
      const g = svg("g", {
        class: `src-label${i === cols.length - 1 ? " eos" : ""}`, "data-src-index": i,
        transform: turn ? `translate(${x},${layout.top - 6}) rotate(-${LABEL_ANGLE})`
          : `translate(${x},${layout.top - 8})`,
      }, root);
      const label = fitLabel(token, LABEL_MAX_PX);
      const w = labelWidth(label) + 6;
      const bg = svg("rect", { class: "label-bg", x: turn ? -3 : -w / 2, y: -8, width: w, height: 16, rx: 3 }, g);
      svgText(g, { x: 0, y: 0, "text-anchor": turn ? "start" : "middle", "dominant-baseline": "central" }, label);
      if (label !== token) svg("title", {}, g).textContent = token;
      return { g, bg };
    });
  }

  /** Output labels (the row headers): focusable; hover highlights, click opens "what if". */
  function drawOutputLabels(root, rows, layout, opts) {
    return rows.map((token, j) => {
      const forced = j < opts.forced;
      const classes = ["out-label", forced ? "forced" : "", j === rows.length - 1 ? "eos" : "",
        opts.clickable ? "clickable" : "", opts.activeRow === j ? "active" : ""];
      const g = svg("g", {
        class: classes.filter(Boolean).join(" "), "data-out-index": j,
        transform: `translate(${layout.rowLabelW - 8},${layout.y(j) + layout.cell / 2})`,
        tabindex: 0, role: opts.clickable ? "button" : null,
        "aria-label": `output token ${j + 1}: ${token}${forced ? " (forced)" : ""}`,
      }, root);
      const w = labelWidth(token) + 8;
      svg("rect", { class: "label-bg", x: -w + 4, y: -9, width: w, height: 18, rx: 3 }, g);
      svgText(g, { x: 0, y: 0, "text-anchor": "end", "dominant-baseline": "central" }, token);
      if (forced) svg("rect", { class: "forced-mark", x: -w - 2, y: -7, width: 3, height: 14, rx: 1.5 }, g);
      return g;
    });
  }

  /** The cells: one rect each, carrying the exact weight the API sent (data-weight). */
  function drawCells(root, weights, nRows, nCols, layout) {
    const grid = svg("g", { class: "cells" }, root);
    for (let j = 0; j < nRows; j++) {
      for (let i = 0; i < nCols; i++) {
        const w = weights[j][i];
        svg("rect", {
          class: "cell", x: layout.x(i), y: layout.y(j), width: layout.cell - 1, height: layout.cell - 1,
          fill: weightColor(w), "data-row": j, "data-col": i, "data-weight": String(w),
        }, grid);
      }
    }
  }

  /** One set of listeners on the SVG (delegation): thousands of cells, a handful of handlers. */
  function bindHeatmapEvents(root, { weights, rows, cols, marks, highlight, opts }) {
    const rowOn = (j) => {
      highlight(j);
      if (opts.onRow) opts.onRow(j);
    };
    const rowOff = () => {
      highlight(null);
      marks.cell.setAttribute("visibility", "hidden");
      if (opts.onLeave) opts.onLeave();
      tooltip.hide();
    };
    const cellTip = (cellNode, event) => {
      const j = Number(cellNode.dataset.row);
      const i = Number(cellNode.dataset.col);
      tooltip.show([fixed(weights[j][i], 3), `${rows[j]} → ${cols[i]}`, `output ${j + 1}, source ${i + 1}`], event);
    };
    root.addEventListener("mouseover", (event) => {
      const target = event.target.closest("[data-row], [data-out-index]");
      if (!target) return;
      if (target.hasAttribute("data-out-index")) {
        marks.cell.setAttribute("visibility", "hidden");
        tooltip.hide();
        rowOn(Number(target.dataset.outIndex));
        return;
      }
      rowOn(Number(target.dataset.row));
      marks.cell.setAttribute("x", target.getAttribute("x") - 1);
      marks.cell.setAttribute("y", target.getAttribute("y") - 1);
      marks.cell.setAttribute("visibility", "visible");
      cellTip(target, event);
    });
    root.addEventListener("mousemove", (event) => {
      if (event.target.hasAttribute("data-row")) cellTip(event.target, event); // the tooltip follows
    });
    root.addEventListener("mouseleave", rowOff);
    // Keyboard: focusing a row label highlights it like hovering; Enter or Space opens "what if".
    root.addEventListener("focusin", (event) => {
      const g = event.target.closest("[data-out-index]");
      if (g) rowOn(Number(g.dataset.outIndex));
    });
    root.addEventListener("focusout", rowOff);
    if (!opts.clickable) return;
    const pick = (event) => {
      const g = event.target.closest("[data-out-index]");
      if (g) opts.onPick(Number(g.dataset.outIndex));
    };
    root.addEventListener("click", pick);
    root.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        pick(event);
      }
    });
  }

  /** A 0..1 colour bar under the grid, so a colour can be read as a value (`label`: what it is). */
  function drawColorLegend(root, x, y, width, label) {
    const id = `ramp-${Math.random().toString(36).slice(2, 8)}`; // unique: several heatmaps share the page
    const gradient = svg("linearGradient", { id }, svg("defs", {}, root));
    for (let k = 0; k <= 10; k++) svg("stop", { offset: `${k * 10}%`, "stop-color": weightColor(k / 10) }, gradient);
    const g = svg("g", { class: "color-legend", transform: `translate(${x},${y})`, "aria-hidden": "true" }, root);
    svg("rect", { width, height: 8, rx: 2, fill: `url(#${id})` }, g);
    svgText(g, { x: 0, y: 18, "dominant-baseline": "central" }, "0");
    svgText(g, { x: width, y: 18, "text-anchor": "end", "dominant-baseline": "central" }, "1");
    svgText(g, { x: width / 2, y: 18, "text-anchor": "middle", "dominant-baseline": "central" }, label);
  }

  // ---------------------------------------------------------------------------- alignment

  /**
   * Source tokens on the top line, output tokens on the bottom one, joined by lines as wide as the
   * attention weight (those under ALIGN_MIN_WEIGHT left out). Returns {highlight(j | null)}.
   */
  /**
   * The alignment: source tokens on a line at the top, output tokens at the bottom, each row of
   * attention a fan of links. Both lines span the card's width (a short output is spread under a
   * long source, so links lean no further than they must), at ALIGN_STEP_MIN px a token at least
   * (past that, the box scrolls); a label wider than its slot is turned, as the heatmap's are.
   */
  function renderAlignmentView(box, srcTokens, hypothesis, opts) {
    const weights = hypothesis.attention;
    const src = srcTokens.concat([EOS]);
    const out = hypothesis.tokens.concat([EOS]);
    const n = Math.max(src.length, out.length);
    const span = Math.max(box.clientWidth - 20, n * ALIGN_STEP_MIN, 240);
    const width = span + 20;
    const slot = (count) => Math.min(span / count, ALIGN_STEP_MAX);
    // Which labels turn: those that do not fit their slot, and all of a line once a quarter of it
    // does not (a line of half-turned labels reads worse than one turned throughout).
    const turner = (list) => {
      const fits = (token) => labelWidth(token) <= slot(list.length) - 2;
      const all = list.filter((token) => !fits(token)).length > list.length / 4;
      return (token) => all || !fits(token);
    };
    const [srcTurned, outTurned] = [turner(src), turner(out)];
    const rise = (list, turned) => {
      const longest = Math.min(Math.max(0, ...list.filter(turned).map(labelWidth)), LABEL_MAX_PX);
      return longest ? Math.ceil(longest * Math.sin(LABEL_ANGLE * Math.PI / 180)) + 8 : 0;
    };
    const ySrc = 22 + rise(src, srcTurned);
    const yOut = ySrc + 110;
    const height = yOut + 22 + rise(out, outTurned);
    // Each line centred in the span, its tokens `slot` apart.
    const xOf = (k, count) => 10 + (span - count * slot(count)) / 2 + (k + 0.5) * slot(count);

    const root = svg("svg", { class: "alignment-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": "alignment: output tokens linked to the source tokens they attend to" });
    const links = svg("g", { class: "links" }, root);
    const lines = [];
    for (let j = 0; j < out.length; j++) {
      for (let i = 0; i < src.length; i++) {
        const w = weights[j][i];
        if (w < ALIGN_MIN_WEIGHT) continue;
        const line = svg("line", {
          x1: xOf(j, out.length), y1: yOut - 12, x2: xOf(i, src.length), y2: ySrc + 12,
          "stroke-width": (8 * w).toFixed(2), "stroke-opacity": (0.25 + 0.6 * w).toFixed(2),
          "data-row": j, "data-col": i, "data-weight": String(w),
        }, links);
        lines.push(line);
      }
    }
    const tokens = (list, y, kind, turnedOf) => list.forEach((token, k) => {
      const x = xOf(k, list.length);
      const turned = turnedOf(token);
      // Turned labels rise away from the links: up-right above the source, down-right below the output.
      const angle = kind === "src" ? -LABEL_ANGLE : LABEL_ANGLE;
      const t = svgText(root, {
        class: `align-token ${kind}${k === list.length - 1 ? " eos" : ""}`, x, y,
        "text-anchor": turned ? "start" : "middle", "dominant-baseline": "central", [`data-align-${kind}`]: k,
        transform: turned ? `rotate(${angle} ${x} ${y})` : null,
      }, turned ? fitLabel(token, LABEL_MAX_PX) : fitLabel(token, slot(list.length) - 2));
      if (kind === "out") t.setAttribute("tabindex", "-1");
    });
    tokens(src, ySrc, "src", srcTurned);
    tokens(out, yOut, "out", outTurned);
    svgText(root, { class: "axis-note", x: 4, y: 8 }, "source");
    svgText(root, { class: "axis-note", x: 4, y: height - 4 }, "output");

    function highlight(j) {
      root.classList.toggle("focused", j !== null && j !== undefined);
      for (const line of lines) line.classList.toggle("hl", Number(line.dataset.row) === j);
      root.querySelectorAll(".align-token.out")
        .forEach((t) => t.classList.toggle("hl", Number(t.dataset.alignOut) === j));
    }
    root.addEventListener("mouseover", (event) => {
      const target = event.target.closest("[data-align-out], line");
      if (!target) return;
      const j = Number(target.dataset.alignOut !== undefined ? target.dataset.alignOut : target.dataset.row);
      highlight(j);
      opts.onRow && opts.onRow(j);
      if (target.tagName === "line") {
        const i = Number(target.dataset.col);
        tooltip.show([fixed(weights[j][i], 3), `${out[j]} → ${src[i]}`], event);
      } else tooltip.hide();
    });
    root.addEventListener("mouseleave", () => {
      highlight(null);
      opts.onLeave && opts.onLeave();
      tooltip.hide();
    });
    box.replaceChildren(root);
    return { highlight };
  }

  /** The word alignment the server derived from the attention (target word j <- source word i). */
  function renderWordLinks(box, alignment) {
    if (!alignment || !alignment.links.length) {
      box.replaceChildren();
      return;
    }
    box.replaceChildren(el("span", { class: "hint" }, "Word links: "),
      ...alignment.links.map(([i, j]) => el("span", { class: "word-link" },
        alignment.src_words[i], el("span", { class: "arrow", "aria-hidden": "true" }, " → "),
        alignment.tgt_words[j])));
  }

  // -------------------------------------------------------------------------------- n-best

  function renderNbest(list, result, selected, onSelect) {
    const hyps = result.hypotheses;
    list.replaceChildren(...hyps.map((h, k) => el("li", {
      class: k === selected ? "selected" : "", "data-index": k, tabindex: onSelect ? 0 : null,
      role: onSelect ? "button" : null, "aria-current": k === selected ? "true" : null,
      onclick: onSelect ? () => onSelect(k) : null,
      onkeydown: onSelect ? (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          onSelect(k);
        }
      } : null,
    },
    el("span", { class: "nbest-text" }, h.text === "" ? "(empty)" : h.text),
    el("span", { class: "nbest-score", title: `score ${h.score}, log-prob ${h.log_prob}` },
      fixed(h.score, 3),
      h.log_prob !== h.score ? el("span", { class: "hint" }, ` (log p ${fixed(h.log_prob, 3)})`) : null))));
  }

  // ----------------------------------------------------------------------------- beam tree

  /** Node ids from the root to `id`, following parents. */
  function pathTo(byId, id) {
    const path = new Set();
    let node = id === null || id === undefined ? null : byId.get(id);
    while (node) {
      path.add(node.id);
      node = node.parent === null ? null : byId.get(node.parent);
    }
    return path;
  }

  /**
   * Where each node goes: one column per step, left to right; inside a column, children in their
   * parents' order (then by log-prob), so no two edges cross.
   */
  function beamLayout(nodes) {
    const columns = new Map();
    for (const n of nodes) {
      if (!columns.has(n.step)) columns.set(n.step, []);
      columns.get(n.step).push(n);
    }
    const steps = Array.from(columns.keys()).sort((a, b) => a - b);
    const slot = new Map();
    for (const s of steps) {
      const column = columns.get(s);
      column.sort((a, b) => (slot.get(a.parent) ?? 0) - (slot.get(b.parent) ?? 0) || b.log_prob - a.log_prob);
      column.forEach((n, k) => slot.set(n.id, k));
    }
    const boxW = clamp(Math.ceil(Math.max(...nodes.map((n) => labelWidth(n.token)))) + 14, 26, 90);
    const colW = boxW + 26; // room for the edges and a finished node's "#k"
    const rowH = 24;
    const top = 22; // the step numbers
    const tallest = Math.max(...Array.from(columns.values(), (c) => c.length));
    return {
      steps, boxW, boxH: 18, colW,
      width: steps.length * colW + 10,
      height: top + tallest * rowH + 6,
      x: (n) => 6 + (n.step - steps[0]) * colW,
      y: (n) => top + slot.get(n.id) * rowH,
    };
  }

  /**
   * The beam search tree: nodes coloured by status (kept, finished, pruned), the best hypothesis'
   * path highlighted, and the selected one's when another is picked in the n-best list. Clicking a
   * finished node that ended a hypothesis selects it.
   */
  function renderBeamTree(box, result, selected, onSelect) {
    if (!result.beam || !result.beam.nodes || !result.beam.nodes.length) {
      box.replaceChildren(el("p", { class: "note" },
        "The beam tree appears with beam size > 1 (greedy search and sampling keep no tree)."));
      return;
    }
    const nodes = result.beam.nodes;
    const byId = new Map(nodes.map((n) => [n.id, n]));
    const paths = {
      best: pathTo(byId, result.hypotheses[0].node),
      picked: selected ? pathTo(byId, result.hypotheses[selected].node) : new Set(),
    };
    const hypothesisOf = new Map(result.hypotheses.map((h, k) => [h.node, k]));
    const layout = beamLayout(nodes);
    const { width, height } = layout;
    const root = svg("svg", {
      id: "beam-tree", class: "beam-svg", width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `beam search tree: ${nodes.length} nodes over ${layout.steps.length - 1} steps`,
    });
    layout.steps.forEach((s, k) => svgText(root, {
      class: "step-label", x: 6 + k * layout.colW + layout.boxW / 2, y: 9, "text-anchor": "middle",
    }, s < 0 ? "start" : `${s + 1}`));
    drawBeamEdges(root, nodes, byId, paths, layout);
    drawBeamNodes(root, nodes, paths, hypothesisOf, layout);
    bindBeamEvents(root, byId, hypothesisOf, onSelect);
    box.replaceChildren(root);
  }

  /** Curved parent-to-child edges, under the nodes; the highlighted paths drawn last, on top. */
  function drawBeamEdges(root, nodes, byId, paths, layout) {
    const rank = (n) => (paths.best.has(n.id) ? 2 : paths.picked.has(n.id) ? 1 : 0);
    const edges = svg("g", { class: "edges" }, root);
    const children = nodes.filter((n) => n.parent !== null && byId.has(n.parent)).sort((a, b) => rank(a) - rank(b));
    for (const n of children) {
      const p = byId.get(n.parent);
      const x1 = layout.x(p) + layout.boxW;
      const y1 = layout.y(p) + layout.boxH / 2;
      const x2 = layout.x(n);
      const y2 = layout.y(n) + layout.boxH / 2;
      const mid = (x1 + x2) / 2;
      svg("path", {
        d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
        class: `edge ${n.status}${["", " picked", " best"][rank(n)]}`,
      }, edges);
    }
  }

  function drawBeamNodes(root, nodes, paths, hypothesisOf, layout) {
    const { boxW, boxH } = layout;
    const layer = svg("g", { class: "nodes" }, root);
    for (const n of nodes) {
      const k = hypothesisOf.get(n.id);
      const classes = ["node", n.status, n.token === EOS ? "eos" : "", paths.best.has(n.id) ? "best" : "",
        paths.picked.has(n.id) ? "picked" : "", k !== undefined ? "hypothesis" : ""];
      const g = svg("g", {
        class: classes.filter(Boolean).join(" "), transform: `translate(${layout.x(n)},${layout.y(n)})`,
        "data-node-id": n.id, "data-status": n.status, "data-step": n.step, "data-token": n.token,
      }, layer);
      svg("rect", { width: boxW, height: boxH, rx: 4 }, g);
      svgText(g, { x: boxW / 2, y: boxH / 2, "text-anchor": "middle", "dominant-baseline": "central" },
        fitLabel(n.token, boxW - 6));
      if (k !== undefined) {
        svgText(g, { class: "rank", x: boxW + 3, y: 3, "dominant-baseline": "central" }, `#${k + 1}`);
      }
    }
  }

  function bindBeamEvents(root, byId, hypothesisOf, onSelect) {
    root.addEventListener("mouseover", (event) => {
      const g = event.target.closest("[data-node-id]");
      if (!g) return;
      const n = byId.get(Number(g.dataset.nodeId));
      const k = hypothesisOf.get(n.id);
      const lines = [`“${n.token}” · ${n.status}`, n.step < 0 ? "the start" : `step ${n.step + 1}`,
        `log-prob ${fixed(n.log_prob, 4)} (cumulative)`];
      if (n.score !== undefined && n.score !== n.log_prob) lines.push(`score ${fixed(n.score, 4)}`);
      if (k !== undefined) lines.push(`hypothesis #${k + 1}${k === 0 ? " (best)" : ""} — click to inspect`);
      tooltip.show(lines, event);
    });
    root.addEventListener("mouseleave", () => tooltip.hide());
    root.addEventListener("click", (event) => {
      const g = event.target.closest("[data-node-id]");
      const k = g ? hypothesisOf.get(Number(g.dataset.nodeId)) : undefined;
      if (k !== undefined && onSelect) onSelect(k);
    });
  }

  // ----------------------------------------------------------------------- side by side

  async function translateCompare(sentence, options) {
    const names = chosenCompareModels();
    if (names.length === 0) {
      showError("choose at least one model to compare");
      return;
    }
    const seq = ++state.seq;
    setBusy(true, `Translating with ${names.length} models…`);
    // One request per model, in parallel: the server batches them on its worker.
    const settled = await Promise.all(names.map((model) =>
      api("v1/translate", translateBody(model, sentence, options, null))
        .then((response) => ({ model, response }), (error) => ({ model, error }))));
    if (seq !== state.seq) return;
    // Beside the first model, each other model's attention on the first's output (an int8 export's
    // beside its float32 model's): asked again with that output forced where its own differs.
    await Promise.all(settled.slice(1).map((entry) => attentionGap(settled[0], entry, sentence, options)));
    if (seq !== state.seq) return;
    setBusy(false, "");
    state.compare = settled;
    state.single = null;
    // A model that failed says so in its own panel; the banner is for when none could answer.
    const failed = settled.filter((r) => r.error);
    if (failed.length === settled.length) showError(failed.map((r) => `${r.model}: ${errorText(r.error)}`).join("; "));
    else clearError();
    renderCompare();
  }

  function renderCompare() {
    const view = $("compare-view");
    showView("compare");
    tooltip.hide();
    const panels = state.compare.map(({ model }) => {
      const info = modelByName(model);
      return el("section", { class: "card model-panel", "data-model": model, "aria-label": `model ${model}` },
        el("div", { class: "card-head" }, el("h2", {}, model),
          el("span", { class: "meta" }, info ? describeModel(info) : "")));
    });
    view.replaceChildren(...panels);
    // Drawn once the panels are in the page: the heatmaps size their cells to the panel's width.
    state.compare.forEach(({ model, response, error }, k) => {
      const panel = panels[k];
      if (error) {
        panel.append(el("p", { class: "note panel-error" }, errorText(error)));
        return;
      }
      const result = response.results[0];
      const best = result.hypotheses[0];
      panel.append(el("div", { class: "output-text" }, best.text),
        el("div", { class: "meta" }, `score ${fixed(best.score, 4)} · ${best.tokens.length} tokens`));
      const heat = el("div", { class: "heatmap scroll-x" });
      panel.append(heat);
      if (best.attention) {
        renderHeatmap(heat, result.src_tokens, best, { forced: 0, clickable: false, activeRow: null });
      }
      else heat.append(noAttentionNote(model));
      if ($("permute").checked && !can(model, "intervention")) panel.append(cannotNote(model, "intervention"));
      if (response.gap) renderGap(panel, response.gap, result.src_tokens);
      const list = el("ol", { class: "nbest nbest-list" });
      renderNbest(list, result, 0, null);
      panel.append(el("h3", {}, "N-best"), list);
    });
    markRendered();
  }

  const sameTokens = (a, b) => a.length === b.length && a.every((t, k) => t === b[k]);

  /**
   * entry.response.gap: how far entry's attention is from first's on first's output: |Δ| per cell
   * (rows first's output tokens + </s>, columns the source + </s>), its mean and max, and the rows
   * whose most-attended source token moved. A model whose own output differs reads first's output
   * as a forced prefix (one more request): the rows up to first's </s> row then see the same inputs.
   */
  async function attentionGap(first, entry, sentence, options) {
    if (!first.response || !entry.response) return;
    const base = first.response.results[0].hypotheses[0];
    const own = entry.response.results[0].hypotheses[0];
    if (!base.attention || !own.attention) return;
    const gap = { against: first.model, forced: false };
    entry.response.gap = gap;
    if (!sameTokens(first.response.results[0].src_tokens, entry.response.results[0].src_tokens)) {
      gap.note = `${entry.model} splits the source into other tokens than ${first.model}: no cell-by-cell comparison`;
      return;
    }
    let weights = own.attention;
    if (!sameTokens(base.tokens, own.tokens)) {
      try {
        const again = await api("v1/translate", translateBody(entry.model, sentence, options, base.tokens));
        weights = again.results[0].hypotheses[0].attention;
        gap.forced = true;
      } catch (error) {
        gap.note = `${entry.model} could not read ${first.model}'s output: ${errorText(error)}`;
        return;
      }
    }
    const rows = base.tokens.length + 1;
    gap.tokens = base.tokens;
    gap.diff = base.attention.map((row, j) => row.map((w, i) => Math.abs(w - weights[j][i])));
    const cells = gap.diff.flat();
    gap.mean = cells.reduce((a, b) => a + b, 0) / Math.max(cells.length, 1);
    gap.max = Math.max(0, ...cells);
    const argmax = (row) => row.reduce((best, w, i) => (w > row[best] ? i : best), 0);
    gap.rows = rows;
    gap.moved = base.attention.filter((row, j) => argmax(row) !== argmax(weights[j])).length;
  }

  function renderGap(panel, gap, srcTokens) {
    const box = el("section", { class: "gap", "data-against": gap.against });
    panel.append(box);
    box.append(el("h3", {}, `|Δ attention| against ${gap.against}`));
    if (gap.note) {
      box.append(el("p", { class: "note" }, gap.note));
      return;
    }
    Object.assign(box.dataset, { mean: String(gap.mean), max: String(gap.max), moved: String(gap.moved),
      forced: String(gap.forced) });
    box.append(el("div", { class: "meta gap-figures" },
      `mean ${fixed(gap.mean, 4)} per cell · max ${fixed(gap.max, 3)} · most-attended source token moved in ` +
      `${gap.moved} of ${gap.rows} rows` + (gap.forced ? ` · read on ${gap.against}'s output (forced)` : "")));
    const heat = el("div", { class: "heatmap gap-map scroll-x" });
    box.append(heat);
    renderHeatmap(heat, srcTokens, { tokens: gap.tokens, attention: gap.diff },
      { forced: 0, clickable: false, activeRow: null, legend: "|weight difference|" });
  }

  // --------------------------------------------------------------------------- start-up

  function rerender() {
    if (state.single) renderSingle();
    else if (state.compare) renderCompare();
  }

  async function loadModels() {
    try {
      const data = await api("v1/models");
      state.models = data.models || [];
    } catch (error) {
      showError(`cannot list the models: ${errorText(error)}`);
      return;
    }
    if (!state.models.length) {
      showError("the server has no model loaded");
      return;
    }
    const kind = (m) => (m.attention === "none" ? "no attention" : m.attention);
    $("model").replaceChildren(...state.models.map((m) => el("option", { value: m.name }, `${m.name} (${kind(m)})`)));
    fillDefaults(state.models[0]);
    showModelInfo();
    renderCompareChoices();
    // ?s=...&model=... starts with a translation (a link to a sentence worth showing someone).
    const params = new URLSearchParams(window.location.search);
    if (params.get("model") && modelByName(params.get("model"))) {
      $("model").value = params.get("model");
      fillDefaults(modelByName(params.get("model")));
      showModelInfo();
    }
    if (params.get("s")) {
      $("sentence").value = params.get("s");
      submit();
    }
  }

  function start() {
    $("translate-form").addEventListener("submit", (event) => {
      event.preventDefault();
      submit();
    });
    $("model").addEventListener("change", () => {
      const model = modelByName($("model").value);
      if (model) fillDefaults(model);
      showModelInfo();
    });
    $("sampling").addEventListener("change", syncSampling);
    for (const side of ["src_lang", "tgt_lang"]) $(side).addEventListener("change", pickLanguage);
    $("attribute").addEventListener("click", attributeShown);
    for (const pick of ["reading", "align-method"]) {
      $(pick).addEventListener("change", () => {
        if (state.single) renderSingle();
      });
    }
    $("permute").addEventListener("change", () => {
      if ($("sentence").value.trim()) submit();
    });
    $("compare-toggle").addEventListener("change", () => {
      renderCompareChoices();
      syncPermute();
      renderLanguages(modelByName($("model").value));
      $("model").disabled = $("compare-toggle").checked;
      if ($("sentence").value.trim()) submit();
    });
    // Sizes follow the window: the heatmap's cells are fitted to its panel.
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(rerender, 150);
    });
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        tooltip.hide();
        if (state.single && state.single.step !== null) {
          state.single.step = null;
          renderSingle();
        }
      }
    });
    showView("empty");
    syncSampling();
    loadModels();
  }

  start();
})();
