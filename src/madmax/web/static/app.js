// The madmax page: a form over the HTTP API (POST /simulate/view, /search, /sweep), plots with the
// plotly.js that the plotly Python package ships, and the form's state in the URL's hash.
"use strict";

const GIB = 2 ** 30;
const UPLOAD = "__upload__";
const MAX_UPLOAD_BYTES = 2 ** 20;  // the server's body limit (GET /health max_body_bytes)
// Form fields kept in the URL (#model=...&system=...), so a view can be shared.
const STATE_FIELDS = ["model", "system", "num_gpus", "task", "global_batch", "seq_len", "prompt_len", "output_len",
                      "batch", "mode", "dtype", "kv_dtype", "stack", "training_stack", "request_rate", "slo", "scenario",
                      "deployments", "prefix_len",
                      "speculative", "draft_len", "acceptance", "draft_model", "strategy", "price", "power", "tokens",
                      "reliability", "objective", "top", "max_tp", "max_pp", "max_ttft", "max_tpot", "time_limit_s"];
const INT_FIELDS = new Set(["num_gpus", "global_batch", "seq_len", "prompt_len", "output_len", "batch", "top",
                            "max_tp", "max_pp", "prefix_len", "draft_len"]);
const FLOAT_FIELDS = new Set(["price", "power", "tokens", "time_limit_s", "request_rate", "max_ttft", "max_tpot",
                              "acceptance"]);
// The result table: key, label, unit (formatting); training and serving results.
const TRAINING_ROWS = [
  ["model", "Model", "text"], ["system", "System", "text"], ["num_gpus", "GPUs", "int"],
  ["strategy", "Strategy", "text"], ["iteration_time_s", "Iteration time", "s"],
  ["tokens_per_s_per_gpu", "Tokens/s per GPU", "num"], ["samples_per_s", "Samples/s", "num"],
  ["mfu", "MFU", "pct"], ["hfu", "HFU", "pct"], ["model_tflops_per_gpu", "Model TFLOP/s per GPU", "num"],
  ["peak_memory_bytes", "Peak memory per GPU", "gib"], ["fits", "Fits in memory", "bool"]];
const SERVING_ROWS = [
  ["model", "Model", "text"], ["system", "System", "text"], ["num_gpus", "GPUs", "int"],
  ["strategy", "Strategy", "text"], ["mode", "Mode", "text"], ["batch", "Batch", "int"],
  ["ttft_s", "Time to first token", "s"], ["tpot_s", "Time per output token", "s"],
  ["e2e_latency_s", "End-to-end latency", "s"], ["output_tokens_per_s_per_gpu", "Output tokens/s per GPU", "num"],
  ["requests_per_s", "Requests/s", "num"], ["mfu", "MFU", "pct"],
  ["peak_memory_bytes", "Peak memory per GPU", "gib"], ["fits", "Fits in memory", "bool"]];
// The result's cost block (`madmax.results.cost.cost_of`), present when a price is known or a power given.
const COST_ROWS = [
  ["price_per_gpu_hour_usd", "Price, USD per GPU-hour", "num"], ["usd_per_hour", "USD per hour", "num"],
  ["usd_per_million_tokens", "USD per million tokens", "num"],
  ["usd_per_million_output_tokens", "USD per million output tokens", "num"],
  ["power_w", "Cluster power, W", "num"], ["joules_per_token", "Joules per token", "num"],
  ["joules_per_output_token", "Joules per output token", "num"]];
// The result's time_to_train block (`madmax.results.goodput`), present when tokens to train are given.
const TIME_TO_TRAIN_ROWS = [
  ["wall_s", "Time to train (expected)", "duration"], ["goodput", "Goodput", "pct"],
  ["effective_training_time_ratio", "Effective training time", "pct"], ["interruptions", "Expected interruptions", "num"],
  ["checkpoint_interval_s", "Checkpoint interval", "duration"], ["gpu_hours", "GPU-hours", "num"],
  ["cost_usd", "Cost, USD", "num"]];

// Twenty distinguishable colours; on each plot, each part or kernel category keeps its colour.
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
                 "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"];
const colours = {};
function colourOf(plot, name) {
  const seen = colours[plot] ??= new Map();
  if (!seen.has(name)) seen.set(name, PALETTE[seen.size % PALETTE.length]);
  return seen.get(name);
}

const $ = (id) => document.getElementById(id);
let uploadedModel = null;
let lastTraceUrl = null;

// Display formats; the browser test reads the numbers back with the same rules.
function format(value, unit) {
  if (value === null || value === undefined) return "-";
  switch (unit) {
    case "s": return value >= 1 ? `${value.toPrecision(4)} s` : `${(value * 1e3).toPrecision(4)} ms`;
    case "pct": return `${(value * 100).toFixed(2)} %`;
    case "gib": return `${(value / GIB).toFixed(2)} GiB`;
    case "int": return String(value);
    case "duration": return value >= 2 * 86400 ? `${(value / 86400).toPrecision(4)} days`
      : value >= 7200 ? `${(value / 3600).toPrecision(4)} h` : `${(value / 60).toPrecision(4)} min`;
    case "num": return value.toPrecision(5);
    case "bool": return value ? "yes" : "no";
    default: return String(value);
  }
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

function setStatus(text) { $("status").textContent = text; }

async function getJSON(url) {
  const response = await fetch(url);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || `${url}: HTTP ${response.status}`);
  return data;
}

async function postJSON(url, body) {
  const response = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"},
                                     body: JSON.stringify(body)});
  let data;
  try { data = await response.json(); } catch { throw new Error(`${url}: HTTP ${response.status}`); }
  if (!response.ok) throw new Error(data.error || `${url}: HTTP ${response.status}`);
  return data;
}

// --- form state ------------------------------------------------------------------------------------

function readForm() {
  const state = {};
  for (const name of STATE_FIELDS) {
    const value = $(name).value.trim();
    if (value !== "") state[name] = value;
  }
  return state;
}

function writeHash(run) {
  const state = readForm();
  if (state.model === UPLOAD) delete state.model;  // an uploaded config does not fit in a URL
  if (run) state.run = run;
  history.replaceState(null, "", "#" + new URLSearchParams(state).toString());
}

function readHash() {
  const params = new URLSearchParams(location.hash.slice(1));
  for (const name of STATE_FIELDS) {
    if (params.has(name)) $(name).value = params.get(name);
  }
  return params.get("run");
}

function taskChanged() {
  const serving = $("task").value === "inference";
  document.querySelectorAll(".serving").forEach((e) => { e.hidden = !serving; });
  document.querySelectorAll(".training").forEach((e) => { e.hidden = serving; });
}

// The request body: the fields shown for the task, numbers as numbers.
function requestBody(fields) {
  const state = readForm();
  const body = {};
  for (const name of fields) {
    if (!(name in state)) continue;
    const label = $(name).closest("label");
    if (label && label.hidden) continue;
    body[name] = INT_FIELDS.has(name) || FLOAT_FIELDS.has(name) ? Number(state[name]) : state[name];
  }
  // One request field, two selects: the serving engines for inference, the training frameworks otherwise.
  if ("training_stack" in body) { body.stack = body.training_stack; delete body.training_stack; }
  if (body.model === UPLOAD) body.model = uploadedModel;
  return body;
}

const SIMULATE_FIELDS = ["model", "system", "num_gpus", "task", "global_batch", "seq_len", "prompt_len",
                         "output_len", "batch", "mode", "dtype", "kv_dtype", "stack", "training_stack", "request_rate",
                         "slo",
                         "scenario", "prefix_len", "speculative", "draft_len", "acceptance", "draft_model", "strategy",
                         "price",
                         "power", "tokens", "reliability"];
const SEARCH_FIELDS = ["model", "system", "num_gpus", "task", "global_batch", "seq_len", "training_stack",
                       "prompt_len", "output_len", "objective", "top", "max_tp", "max_pp", "time_limit_s", "tokens",
                       "reliability"];
// A serving search: with a request rate, the capacity search (GPUs in all: num_gpus caps them), else the layouts
// of num_gpus GPUs; the weight and KV formats chosen narrow the formats tried.
const CAPACITY_FIELDS = ["model", "system", "num_gpus", "task", "prompt_len", "output_len", "request_rate", "slo",
                         "scenario", "deployments", "stack", "objective", "price", "power", "top", "max_tp", "max_pp",
                         "time_limit_s"];
const LAYOUT_FIELDS = ["model", "system", "num_gpus", "task", "prompt_len", "output_len", "mode", "stack", "top",
                       "max_tp", "max_pp", "max_ttft", "max_tpot", "time_limit_s"];

function searchBody() {
  if ($("task").value !== "inference") return requestBody(SEARCH_FIELDS);
  const capacity = $("request_rate").value.trim() !== "";
  const body = requestBody(capacity ? CAPACITY_FIELDS : LAYOUT_FIELDS);
  if ($("dtype").value) body.dtypes = [$("dtype").value];
  if ($("kv_dtype").value) body.kv_dtypes = [$("kv_dtype").value];
  if (!capacity && body.mode === "rate") delete body.mode;  // the layout search simulates static, concurrency or saturation
  return body;
}

// --- simulate --------------------------------------------------------------------------------------

async function runSimulate() {
  showError("");
  writeHash("simulate");
  setStatus("simulating…");
  $("simulate-btn").disabled = true;
  try {
    const view = await postJSON("/simulate/view", requestBody(SIMULATE_FIELDS));
    showResult(view);
    setStatus("");
  } catch (err) {
    showError(err.message);
    setStatus("");
  } finally {
    $("simulate-btn").disabled = false;
  }
}

function showResult(view) {
  const result = view.result;
  const rows = "ttft_s" in result ? SERVING_ROWS : TRAINING_ROWS;
  const body = $("result-table").tBodies[0];
  body.replaceChildren();
  for (const [key, label, unit] of rows) {
    const tr = body.insertRow();
    tr.dataset.key = key;
    tr.dataset.unit = unit;
    tr.insertCell().outerHTML = `<th>${label}</th>`;
    const cell = tr.insertCell();
    cell.textContent = format(result[key], unit);
  }
  addBlockRows(body, COST_ROWS, result.cost || {}, "cost");
  addLatencyRows(body, result);
  const train = result.time_to_train || {};
  addBlockRows(body, TIME_TO_TRAIN_ROWS, train, "train");
  const reason = $("fits-reason");
  reason.textContent = result.fits_reason || "";
  reason.hidden = !result.fits_reason;
  $("assumptions").replaceChildren(...[...(result.assumptions || []), ...(train.assumptions || [])].map((text) => {
    const li = document.createElement("li");
    li.textContent = text;
    return li;
  }));
  showLaunches(result.launch || [], result.launch_note);
  lastTraceUrl = view.trace_url;
  $("trace-link").href = view.trace_url;
  $("simulate-section").hidden = false;
  plotBreakdown(view.bars);
  plotMemory(view.memory_per_stage, result.memory.capacity);
  plotTimeline(view.timeline);
}

// The commands that launch the result (`launch`: engine or framework, command, its config file, notes), or why
// there are none (`launch_note`); text only, never markup.
function showLaunches(launches, note) {
  const parts = [];
  for (const launch of launches) {
    const head = document.createElement("h3");
    const part = {prefill: " (prefill servers)", decode: " (decode servers)", router: " (router)"}[launch.role] || "";
    head.textContent = `${launch.tool} ${launch.version}${part}`;
    const command = document.createElement("pre");
    command.className = "launch-command";
    command.dataset.tool = launch.tool;
    command.textContent = launch.command;
    parts.push(head, command);
    if (launch.config) {
      const config = document.createElement("pre");
      config.className = "launch-config";
      config.textContent = `# ${launch.config_name}\n${launch.config}`;
      parts.push(config);
    }
    const notes = document.createElement("ul");
    for (const text of [...launch.notes, `flags: ${launch.source}`]) {
      const li = document.createElement("li");
      li.textContent = text;
      notes.append(li);
    }
    parts.push(notes);
  }
  if (!launches.length && note) {
    const p = document.createElement("p");
    p.textContent = note;
    parts.push(p);
  }
  $("launch-body").replaceChildren(...parts);
}

// A served result's p99 latencies (rate mode), its highest rate within the SLOs when searched, and each SLO
// held against its limit, each row marked data-slo="1".
function addLatencyRows(body, result) {
  const rows = [];
  for (const [key, label] of [["ttft_s", "p99 time to first token"], ["tpot_s", "p99 time per output token"]]) {
    const p99 = result.latency && result.latency[key] ? result.latency[key].p99 : undefined;
    if (p99 !== undefined && p99 !== null) rows.push([`p99_${key}`, label, format(p99, "s")]);
  }
  const slo = result.slo;
  if (slo && slo.highest_rate !== undefined) {
    rows.push(["highest_rate", "Highest rate within the SLOs", `${format(slo.highest_rate, "num")} requests/s`]);
  }
  if (slo) {
    for (const [key, limit] of Object.entries(slo.limits)) {
      const value = slo.measured ? slo.measured[key] : undefined;
      const ok = value !== undefined && value !== null && value <= limit;
      rows.push([`slo_${key}`, `SLO ${key}`, `${format(value, "s")} ${ok ? "≤" : ">"} ${format(limit, "s")}`]);
    }
  }
  for (const [key, label, text] of rows) {
    const tr = body.insertRow();
    tr.dataset.key = key;
    tr.dataset.slo = "1";
    tr.insertCell().outerHTML = `<th>${label}</th>`;
    tr.insertCell().textContent = text;
  }
}

// The rows of a block of the result (cost, time_to_train) that it holds, each marked data-<flag>="1".
function addBlockRows(body, rows, block, flag) {
  for (const [key, label, unit] of rows) {
    if (!(key in block)) continue;
    const tr = body.insertRow();
    tr.dataset.key = key;
    tr.dataset.unit = unit;
    tr.dataset[flag] = "1";
    tr.insertCell().outerHTML = `<th>${label}</th>`;
    tr.insertCell().textContent = format(block[key], unit);
  }
}

function stacked(plot, groups, categories, scale) {
  // One bar trace per part, stacked over the categories (bars): groups[category] = [[part, value], ...].
  const parts = [];
  for (const c of categories) for (const [part] of groups[c]) if (!parts.includes(part)) parts.push(part);
  return parts.map((part) => ({
    type: "bar", name: part, x: categories, marker: {color: colourOf(plot, part)},
    y: categories.map((c) => { const hit = groups[c].find(([p]) => p === part); return hit ? hit[1] * scale : 0; }),
  }));
}

const LAYOUT = {margin: {l: 60, r: 10, t: 40, b: 40}, barmode: "stack", legend: {font: {size: 10}}, height: 440};

function plotBreakdown(bars) {
  const names = Object.keys(bars);
  Plotly.react("breakdown-plot", stacked("breakdown", bars, names, 1e3),
               {...LAYOUT, title: {text: "Where the time goes (ms)"}, yaxis: {title: {text: "ms"}}},
               {responsive: true, displaylogo: false});
}

function plotMemory(stages, capacity) {
  const groups = {};
  const names = stages.map((s) => `stage ${s.stage}`);
  stages.forEach((s, i) => { groups[names[i]] = Object.entries(s.parts); });
  const layout = {...LAYOUT, title: {text: "Memory per GPU by pipeline stage (GiB)"}, yaxis: {title: {text: "GiB"}}};
  if (capacity) {
    layout.shapes = [{type: "line", xref: "paper", x0: 0, x1: 1, y0: capacity / GIB, y1: capacity / GIB,
                      line: {color: "red", dash: "dash"}}];
  }
  Plotly.react("memory-plot", stacked("memory", groups, names, 1 / GIB), layout, {responsive: true, displaylogo: false});
}

function plotTimeline(timeline) {
  // One line trace per category; each segment a thick line from start to end on its stream's row.
  const byCategory = {};
  for (const [stream, start, end, label, category] of timeline.segments) {
    const t = byCategory[category] ??= {x: [], y: [], text: []};
    const row = timeline.streams[stream];
    t.x.push(start * 1e3, end * 1e3, null);
    t.y.push(row, row, null);
    t.text.push(label, label, null);
  }
  const traces = Object.entries(byCategory).map(([category, t]) => ({
    type: "scatter", mode: "lines", name: category, x: t.x, y: t.y, text: t.text, hoverinfo: "text+x",
    line: {width: 10, color: colourOf("timeline", category)},
  }));
  const omitted = timeline.omitted ? ` (${timeline.omitted} shortest segments left out; the trace has all)` : "";
  Plotly.react("timeline-plot", traces, {
    margin: {l: 120, r: 10, t: 40, b: 40}, title: {text: `One iteration, per stream${omitted}`},
    xaxis: {title: {text: "ms"}}, yaxis: {categoryorder: "array", categoryarray: [...timeline.streams].reverse()},
    height: Math.max(260, 26 * timeline.streams.length + 80),
  }, {responsive: true, displaylogo: false});
}

// Perfetto's documented way in: open the UI, wait for its PONG, post the trace buffer.
async function openInPerfetto() {
  if (!lastTraceUrl) return;
  const buffer = await (await fetch(lastTraceUrl)).arrayBuffer();
  const origin = "https://ui.perfetto.dev";
  const win = window.open(origin);
  if (!win) { showError("the browser blocked the Perfetto window; download the trace and open it there"); return; }
  const timer = setInterval(() => win.postMessage("PING", origin), 50);
  window.addEventListener("message", function onMessage(event) {
    if (event.data !== "PONG") return;
    clearInterval(timer);
    window.removeEventListener("message", onMessage);
    win.postMessage({perfetto: {buffer, title: "madmax iteration", url: location.href}}, origin);
  });
}

// --- search ----------------------------------------------------------------------------------------

async function runSearch() {
  showError("");
  writeHash("search");
  $("search-btn").disabled = true;
  $("search-section").hidden = false;
  $("search-summary").textContent = "searching…";
  $("search-table").tHead.replaceChildren();
  $("search-table").tBodies[0].replaceChildren();
  try {
    const response = await fetch("/search", {method: "POST", headers: {"Content-Type": "application/json"},
                                             body: JSON.stringify(searchBody())});
    if (!response.ok) {
      const data = await response.json();
      throw new Error(data.error || `HTTP ${response.status}`);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      pending += decoder.decode(value, {stream: true});
      const lines = pending.split("\n");
      pending = lines.pop();
      for (const line of lines.filter((l) => l.trim())) {
        const event = JSON.parse(line);
        if (event.event === "progress") $("search-summary").textContent = `searching… ${event.elapsed_s.toFixed(1)} s`;
        else if (event.event === "error") throw new Error(event.error);
        else if (event.event === "result") showSearch(event.result);
      }
    }
  } catch (err) {
    showError(err.message);
    $("search-summary").textContent = "";
  } finally {
    $("search-btn").disabled = false;
  }
}

// The search table: a numbered row per result with a cell per column (data-key its key); `more(tr, r)` adds
// cells after them (a header cell is left empty for them).
function searchTable(columns, rows, more) {
  const head = $("search-table").tHead.insertRow();
  head.innerHTML = "<th>#</th>" + columns.map(([, label]) => `<th>${label}</th>`).join("") + (more ? "<th></th>" : "");
  const body = $("search-table").tBodies[0];
  rows.forEach((r, i) => {
    const tr = body.insertRow();
    tr.insertCell().textContent = String(i + 1);
    for (const [key, , unit] of columns) {
      const cell = tr.insertCell();
      cell.dataset.key = key;
      cell.textContent = format(r[key], unit);
    }
    if (more) more(tr, r);
  });
}

// A capacity search's deployments (one row each, the first confirmed by a whole simulation), or the closest
// replica layouts and what each misses.
function showCapacity(found) {
  const deployments = found.deployments || [];
  const wall = found.wall_s !== undefined ? `${found.wall_s.toFixed(2)} s` : "";
  const slos = Object.keys(found.slo);
  $("search-summary").textContent = `${found.screened.toLocaleString("en-US")} replica layouts screened, ` +
    `${found.simulated} simulated in ${wall}; ` + (deployments.length
      ? `the best ${deployments.length} for ${found.request_rate} requests/s (confirm: ${found.confirm})`
      : "no deployment meets the SLOs; the closest:");
  const columns = deployments.length
    ? [["system", "System", "text"], ["replica", "Replica", "text"], ["dtype", "Weights", "text"],
       ["kv_dtype", "KV cache", "text"], ["replicas", "Replicas", "int"], ["num_gpus", "GPUs", "int"],
       ["rate_per_replica", "Requests/s each", "num"], ...slos.map((k) => [`${k}_s`, k, "s"]),
       ["usd_per_hour", "USD/hour", "num"]]
    : [["system", "System", "text"], ["replica", "Replica", "text"], ["dtype", "Weights", "text"],
       ["kv_dtype", "KV cache", "text"], ["missed", "Misses", "text"]];
  const rows = deployments.length ? deployments
    : found.closest.map((c) => ({...c, missed: c.missed.join("; ")}));
  searchTable(columns, rows);
  const labels = deployments.map((r, i) => `#${i + 1} ${r.replicas} x ${r.replica} ${r.dtype}/${r.kv_dtype}`);
  Plotly.react("search-plot", [{type: "bar", orientation: "h", y: labels.reverse(),
                                x: deployments.map((r) => r.num_gpus).reverse()}],
               {margin: {l: 10, r: 10, t: 40, b: 40}, yaxis: {automargin: true}, title: {text: "GPUs"},
                height: 120 + 28 * deployments.length}, {responsive: true, displaylogo: false});
}

function showSearch(found) {
  if (found.deployments !== undefined) return showCapacity(found);
  const serving = found.task === "inference";
  const results = found.results || [];
  const wall = found.wall_s !== undefined ? `${found.wall_s.toFixed(2)} s` : "";
  $("search-summary").textContent = `${found.enumerated.toLocaleString("en-US")} strategies enumerated, ` +
    `${(found.evaluated ?? 0).toLocaleString("en-US")} evaluated, ${found.simulated} simulated in ${wall}; ` +
    (results.length ? `the best ${results.length}:` : "no strategy fits in memory");
  const columns = serving
    ? [["strategy", "Strategy", "text"], ["dtype", "Weights", "text"], ["kv_dtype", "KV cache", "text"],
       ["batch", "Batch", "int"], ["ttft_s", "TTFT", "s"], ["tpot_s", "TPOT", "s"],
       ["output_tokens_per_s_per_gpu", "Output tok/s/GPU", "num"], ["peak_memory_bytes", "Memory", "gib"]]
    : [["strategy", "Strategy", "text"], ["iteration_time_s", "Iteration time", "s"],
       ["tokens_per_s_per_gpu", "Tokens/s per GPU", "num"], ["mfu", "MFU", "pct"],
       ["peak_memory_bytes", "Memory", "gib"]];
  searchTable(columns, results, (tr, r) => {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "simulate";
    button.addEventListener("click", () => {
      $("strategy").value = r.strategy;
      if (serving) $("batch").value = r.batch;
      runSimulate();
    });
    tr.insertCell().append(button);
  });
  const key = serving ? "output_tokens_per_s_per_gpu" : "tokens_per_s_per_gpu";
  // Rank first: two serving layouts may share a strategy and differ in batch or formats.
  const labels = results.map((r, i) => `#${i + 1} ${r.strategy}`);
  Plotly.react("search-plot", [{type: "bar", orientation: "h", y: labels.reverse(), x: results.map((r) => r[key]).reverse()}],
               {margin: {l: 10, r: 10, t: 40, b: 40}, yaxis: {automargin: true}, title: {text: `Top strategies: ${key}`},
                height: 120 + 28 * results.length}, {responsive: true, displaylogo: false});
}

// --- sweep -----------------------------------------------------------------------------------------

let sweepJob = null;

async function runSweep() {
  showError("");
  $("sweep-btn").disabled = true;
  try {
    sweepJob = await postJSON("/sweep", {spec: $("sweep-spec").value});
    await pollSweep();
  } catch (err) {
    showError(err.message);
  } finally {
    $("sweep-btn").disabled = false;
  }
}

async function pollSweep() {
  for (;;) {
    const job = await getJSON(`/sweep/${sweepJob.id}`);
    $("sweep-progress").max = Math.max(1, job.total);
    $("sweep-progress").value = job.done;
    $("sweep-status").textContent = `${job.done} / ${job.total} points (${job.state}) in ${job.directory}`;
    if (job.state === "failed") throw new Error(job.error);
    if (job.state === "done") break;
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  await plotPareto();
}

async function plotPareto() {
  if (!sweepJob) return;
  const x = $("pareto-x").value, y = $("pareto-y").value;
  const data = await getJSON(`/sweep/${sweepJob.id}/pareto?x=${x}&y=${y}`);
  const label = (r) => `${r.model} on ${r.num_gpus} x ${r.system}<br>${r.strategy ?? ""}`;
  Plotly.react("pareto-plot", [
    {type: "scatter", mode: "markers", name: "points", x: data.points.map((r) => r[x]),
     y: data.points.map((r) => r[y]), text: data.points.map(label), marker: {color: "#9aa"}},
    {type: "scatter", mode: "lines+markers", name: "Pareto frontier", x: data.frontier.map((r) => r[x]),
     y: data.frontier.map((r) => r[y]), text: data.frontier.map(label), line: {shape: "hv"}},
  ], {margin: {l: 70, r: 10, t: 40, b: 50}, title: {text: `Pareto frontier: ${y} against ${x}`},
      xaxis: {title: {text: x}}, yaxis: {title: {text: y}}}, {responsive: true, displaylogo: false});
}

// --- start -----------------------------------------------------------------------------------------

async function fillCatalog() {
  const [models, systems, stacks] = await Promise.all([getJSON("/catalog/models"), getJSON("/catalog/systems"),
                                                       getJSON("/catalog/training_stacks")]);
  $("model").replaceChildren(...models.map((m) => new Option(m.name, m.name)));
  // the default stack is the empty value: a request without a stack runs it
  $("training_stack").replaceChildren(...stacks.map((t) => new Option(t.name, t.default ? "" : t.name)));
  $("system").replaceChildren(...systems.map((s) => new Option(`${s.name} (${s.gpus_per_node} x ${s.gpu})`, s.name)));
  $("model").value = "llama-3-8b";
  $("system").value = "dgx-h100";
}

function uploadChanged() {
  const file = $("model-file").files[0];
  if (!file) return;
  if (file.size > MAX_UPLOAD_BYTES) {
    showError(`${file.name} is ${file.size.toLocaleString("en-US")} bytes; allowed: up to 1 MB (a model's config.json is a few kB)`);
    return;
  }
  file.text().then((text) => {
    try { uploadedModel = JSON.parse(text); } catch (err) { showError(`${file.name} is not valid JSON: ${err.message}`); return; }
    let option = $("model").querySelector(`option[value="${UPLOAD}"]`);
    if (!option) { option = new Option("", UPLOAD); $("model").prepend(option); }
    option.textContent = `uploaded: ${file.name}`;
    $("model").value = UPLOAD;
    showError("");
  });
}

async function start() {
  try {
    await fillCatalog();
  } catch (err) {
    showError(err.message);
    return;
  }
  const run = readHash();
  taskChanged();
  $("task").addEventListener("change", () => { taskChanged(); writeHash(); });
  $("run-form").addEventListener("change", () => writeHash());
  $("run-form").addEventListener("submit", (event) => { event.preventDefault(); runSimulate(); });
  $("search-btn").addEventListener("click", runSearch);
  $("sweep-btn").addEventListener("click", runSweep);
  $("perfetto-btn").addEventListener("click", openInPerfetto);
  $("model-file").addEventListener("change", uploadChanged);
  $("pareto-x").addEventListener("change", () => plotPareto().catch((e) => showError(e.message)));
  $("pareto-y").addEventListener("change", () => plotPareto().catch((e) => showError(e.message)));
  document.body.dataset.ready = "1";
  if (run === "simulate") runSimulate();
  else if (run === "search") runSearch();
}

start();
