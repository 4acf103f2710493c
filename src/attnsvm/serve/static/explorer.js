// The explorer: one POST /explain per query; switching heads or the target item re-renders
// from that answer, without another request. Everything is built with DOM calls and
// textContent (titles come from data files, never read as HTML).
"use strict";

const state = { answer: null, head: 0, target: 0 };
const $ = (id) => document.getElementById(id);

function element(tag, attributes = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "text") node.textContent = value;
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function fixed(value, digits = 4) {
  return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
}

function setStatus(text, error = false) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

async function getJSON(url, options) {
  const response = await fetch(url, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}

async function loadRun() {
  const meta = await getJSON("/metadata");
  const metrics = Object.entries(meta.test_metrics)
    .filter(([name]) => /^(HR|NDCG)@10$/.test(name))
    .map(([name, value]) => `${name} ${Number(value).toFixed(4)}`);
  $("run").textContent =
    `${meta.model} on ${meta.dataset.split("/").pop()} — ${meta.catalogue_size} items, ${meta.users} users` +
    (metrics.length ? ` — test ${metrics.join(", ")}` : "") +
    (meta.attention.length ? "" : " — a baseline: no attention to show");
  $("k").max = meta.limits.explain_k;
  const users = await getJSON("/users?limit=100");
  $("user-list").replaceChildren(...users.map((u) => element("option", { value: u })));
  await searchItems("");
}

async function searchItems(text) {
  const found = await getJSON(`/items?limit=30&query=${encodeURIComponent(text)}`);
  $("item-list").replaceChildren(
    ...found.map((i) => element("option", { value: i.item, label: i.title || String(i.item) })),
  );
}

function query() {
  const user = $("user").value.trim();
  const k = Number($("k").value);
  if (user) return { user, k };
  const history = $("history").value.split(/[\s,]+/).filter((s) => s.length);
  return { history, k };
}

async function explain(event) {
  event.preventDefault();
  setStatus("computing…");
  try {
    state.answer = await getJSON("/explain", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(query()),
    });
    state.target = 0;
    state.head = Math.min(state.head, state.answer.reading.heads.length - 1);
    render();
    setStatus(`history of ${state.answer.history_length} items; the model reads the last ` +
      `${state.answer.reading.tokens.length}`);
  } catch (error) {
    setStatus(error.message, true);
  }
}

function render() {
  renderRecommendations();
  renderHeads();
  renderTokens();
}

function renderRecommendations() {
  const rows = state.answer.items.map((item, index) => {
    const row = element("tr", { "data-item": item.item, "data-score": item.score }, [
      element("td", { class: "num", text: index + 1 }),
      element("td", { text: item.item }),
      element("td", { class: "title", text: item.title || "" }),
      element("td", { class: "category", text: item.category || "" }),
      element("td", { class: "num score", text: fixed(item.score) }),
    ]);
    if (index === state.target) row.classList.add("target");
    row.addEventListener("click", () => { state.target = index; render(); });
    return row;
  });
  $("recommendations").tBodies[0].replaceChildren(...rows);
}

function renderHeads() {
  const buttons = state.answer.reading.heads.map((head, index) => {
    const button = element("button", {
      class: "head" + (index === state.head ? " active" : ""),
      "data-layer": head.layer, "data-head": head.head, role: "tab",
      text: `layer ${head.layer} · head ${head.head}`,
    });
    button.addEventListener("click", () => { state.head = index; render(); });
    return button;
  });
  $("heads").replaceChildren(...buttons);
}

function bar(value, scale, kind) {
  const width = scale > 0 ? Math.round(60 * Math.abs(value) / scale) : 0;
  return element("span", { class: `bar ${kind}`, style: `width:${width}px` });
}

function describe(head, kind) {
  const optimal = head.optimal[kind][state.target];
  const verdict = { global: "globally optimal", local: "locally optimal", neither: "neither" };
  return `${kind}: optimal token ${optimal}, the selection is ` +
    `${verdict[head.classes[kind][state.target]]}`;
}

function renderTokens() {
  const reading = state.answer.reading;
  const head = reading.heads[state.head];
  const kinds = ["linear", "counterfactual"].filter((kind) => kind in head.scores);
  const scores = Object.fromEntries(kinds.map((kind) => [kind, head.scores[kind][state.target]]));
  // linear scores are signed contributions (bars from 0); counterfactual ones are the
  // target's whole logit, so their bars show the distance above the lowest token's
  const ranges = Object.fromEntries(kinds.map((kind) => {
    const values = scores[kind].filter((v) => v !== null);
    const low = kind === "counterfactual" ? Math.min(...values) : 0;
    return [kind, [low, Math.max(0, ...values.map((v) => Math.abs(v - low)))]];
  }));
  const widest = Math.max(...head.attention);
  const table = $("tokens");
  table.dataset.layer = head.layer;
  table.dataset.head = head.head;
  table.dataset.target = reading.candidates[state.target];
  const rows = reading.tokens.map((token, position) => {
    const marks = [];
    if (position === head.selected) marks.push(["selected", "selected"]);
    for (const kind of kinds) {
      if (head.optimal[kind][state.target] === position) marks.push(["optimal", `optimal (${kind})`]);
    }
    if (head.neighbours.includes(position)) marks.push(["neighbour", "neighbour"]);
    const cells = [
      element("td", { class: "num", text: position }),
      element("td", { text: token.item === null ? "" : token.item }),
      element("td", { text: token.title || "" }),
      element("td", { class: "num attention" }, [
        bar(head.attention[position], widest, "attention"), fixed(head.attention[position], 3),
      ]),
    ];
    for (const kind of ["linear", "counterfactual"]) {
      const value = kind in scores ? scores[kind][position] : null;
      const cell = element("td", { class: `num ${kind}` });
      if (value !== null) {
        const [low, scale] = ranges[kind];
        cell.append(bar(value - low, scale, value - low >= 0 ? "positive" : "negative"));
      }
      cell.append(fixed(value, 3));
      cells.push(cell);
    }
    cells.push(element("td", {}, marks.map(([kind, text]) =>
      element("span", { class: `mark ${kind}`, text }))));
    const row = element("tr", {
      "data-position": position, "data-attention": head.attention[position],
    }, cells);
    if (position === head.selected) row.classList.add("selected");
    return row;
  });
  table.tBodies[0].replaceChildren(...rows);
  const target = state.answer.items[state.target];
  const svm = { hard: "hard-margin", soft: "soft-margin (no W separates it)", none: "no rival" };
  $("summary").textContent =
    `Layer ${head.layer}, head ${head.head} selects token ${head.selected}; scores toward ` +
    `${target.title || target.item}. ` + kinds.map((kind) => describe(head, kind)).join("; ") +
    `. Att-SVM of the selection: ${svm[head.svm]}, ${head.neighbours.length} neighbour(s).`;
  $("notes").textContent = reading.notes.join(" ");
}

$("query").addEventListener("submit", explain);
$("item-search").addEventListener("input", (event) => searchItems(event.target.value));
$("item-search").addEventListener("change", (event) => {
  const value = event.target.value.trim();
  if (!value) return;
  $("user").value = "";
  $("history").value = ($("history").value.trim() + " " + value).trim();
  event.target.value = "";
});
loadRun().catch((error) => setStatus(error.message, true));
