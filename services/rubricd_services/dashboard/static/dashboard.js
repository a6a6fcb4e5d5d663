// rubricd dashboard: polls the JSON routes of the dashboard (`rubricd serve dashboard`, app.py) and draws them (plain DOM and SVG, no build step).
// Every text of a rollout is policy text: it goes into the page as text nodes and attributes (el), never as HTML.
"use strict";

const COLORS = ["#1d4ed8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#be185d", "#4d7c0f"];
const SVG = "http://www.w3.org/2000/svg";
const MAX_RUBRICS = 40; // rows of the met-rate table
const opened = new URLSearchParams(location.hash.slice(1));
const state = {
  run: opened.get("run"),
  rollout: opened.get("rollout"), // the rollout shown: the one the page was opened for or picked, else a default
  rolloutStep: null, // the step whose rollouts are listed (null: the run's latest)
  view: null, // the last rollout read: { key, value } (a kept rollout never changes: read once)
  drawn: null, // the key of the rollout drawn
  services: new Set(),
  classes: [],
  refreshes: 0,
  steps: null, // the run's rows read so far: { run, cursor, rows: Map step -> row, versions: Map version -> row }; a poll reads the changed ones
};
// A meta-class has one color in the reward chart and the schedule strip; the total is COLORS[0].
const classColor = (name) => COLORS[(1 + state.classes.indexOf(name)) % COLORS.length];

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// `notFound`: what a 404 returns instead of an error.
async function get(path, notFound = undefined) {
  const response = await fetch(path, { cache: "no-store" });
  if (response.status === 404 && notFound !== undefined) return notFound;
  if (!response.ok) throw new Error(`${path}: HTTP ${response.status}`);
  return response.json();
}

const fmt = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
const clock = (at) => (at ? new Date(at * 1000).toISOString().slice(11, 23) : "–");
const day = (at) => (at ? new Date(at * 1000).toISOString().slice(0, 19).replace("T", " ") : "–");

// --- Charts ---

function frame(steps, yMin, yMax, width = 540, height = 220, label = (v) => fmt(v, 2)) {
  const m = { left: 40, right: 10, top: 10, bottom: 24 };
  const x0 = Math.min(...steps), x1 = Math.max(...steps);
  const x = (s) => m.left + (x1 === x0 ? 0.5 : (s - x0) / (x1 - x0)) * (width - m.left - m.right);
  const y = (v) => height - m.bottom - ((v - yMin) / (yMax - yMin || 1)) * (height - m.top - m.bottom);
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}` });
  for (let i = 0; i <= 4; i++) {
    const v = yMin + ((yMax - yMin) * i) / 4;
    svg.append(el("svg:line", { x1: m.left, x2: width - m.right, y1: y(v), y2: y(v), stroke: "#e3e5e8" }));
    svg.append(el("svg:text", { x: m.left - 6, y: y(v) + 4, "text-anchor": "end" }, label(v)));
  }
  const every = Math.max(1, Math.ceil(steps.length / 12));
  steps.forEach((s, i) => {
    if (i % every === 0) svg.append(el("svg:text", { x: x(s), y: height - 6, "text-anchor": "middle" }, s));
  });
  return { svg, x, y, m };
}

function lineChart(container, steps, series, yMin, yMax) {
  container.replaceChildren();
  if (!steps.length) {
    container.append(el("p", { class: "note empty" }, "no kept scores yet"));
    return;
  }
  const { svg, x, y } = frame(steps, yMin, yMax);
  const legend = el("div", { class: "legend" });
  series.forEach((s) => {
    const color = s.color;
    const group = el("svg:g", { class: "series", "data-series": s.name });
    let d = "";
    let pen = "M";
    s.values.forEach((v, j) => {
      if (v === null || v === undefined) {
        pen = "M";
        return;
      }
      d += `${pen}${x(steps[j]).toFixed(1)},${y(v).toFixed(1)} `;
      pen = "L";
      group.append(
        el("svg:circle", { cx: x(steps[j]), cy: y(v), r: s.width > 2 ? 3 : 2, fill: color, "data-step": steps[j] },
          el("svg:title", {}, `${s.name}, step ${steps[j]}: ${fmt(v)}`)),
      );
    });
    group.prepend(el("svg:path", { d, fill: "none", stroke: color, "stroke-width": s.width, "stroke-dasharray": s.dash }));
    svg.append(group);
    legend.append(el("span", {}, el("i", { style: `background:${color}` }), s.name));
  });
  container.append(svg, legend);
}

function barChart(container, steps, values, titles) {
  container.replaceChildren();
  if (!steps.length) {
    container.append(el("p", { class: "note empty" }, "no kept scores yet"));
    return;
  }
  const top = Math.max(0.1, ...values.filter((v) => v !== null));
  const { svg, x, y } = frame(steps, 0, top, 540, 160, (v) => `${Math.round(100 * v)}%`);
  const width = Math.max(2, Math.min(24, 400 / steps.length));
  steps.forEach((s, i) => {
    const v = values[i] ?? 0;
    svg.append(
      el("svg:rect", { class: "bar", "data-step": s, x: x(s) - width / 2, y: y(v), width, height: y(0) - y(v), fill: v ? "#b91c1c" : "#ccc" },
        el("svg:title", {}, titles[i])),
    );
  });
  container.append(svg);
}

// --- Sections ---

function drawRewards(steps) {
  const xs = steps.map((s) => s.step);
  const series = [{ name: "total", values: steps.map((s) => s.reward), width: 3, color: COLORS[0] }];
  for (const c of state.classes) {
    series.push({ name: c, values: steps.map((s) => s.meta_classes[c] ?? null), width: 1.5, dash: "5 3", color: classColor(c) });
  }
  if (steps.some((s) => s.evaluation_rollouts)) {
    series.push({ name: "evaluation", values: steps.map((s) => s.evaluation_reward), width: 1.5, dash: "1 3", color: "#555" });
  }
  const values = series.flatMap((s) => s.values).filter((v) => v !== null);
  lineChart(document.querySelector("#rewards .chart"), xs, series, Math.min(0, ...values), Math.max(1, ...values));
}

function drawFailures(steps) {
  const titles = steps.map((s) => `step ${s.step}: ${s.failed} of ${s.scored} judge calls failed` + (s.rejected ? `, ${s.rejected} rejected` : ""));
  barChart(document.querySelector("#failures .chart"), steps.map((s) => s.step), steps.map((s) => s.failure_rate), titles);
  const failed = steps.reduce((n, s) => n + s.failed, 0), scored = steps.reduce((n, s) => n + s.scored, 0);
  document.getElementById("failure-total").textContent = scored
    ? `${failed} of ${scored} scores failed (${fmt((100 * failed) / scored, 1)}%): no reward, never a silent 0.`
    : "";
}

function drawSchedule(schedule) {
  const strip = document.querySelector("#classes .strip");
  strip.replaceChildren();
  if (!schedule.length) {
    document.getElementById("active-class").textContent = "no schedule: this run's reward is not alternating";
    return;
  }
  const latest = schedule[schedule.length - 1];
  document.getElementById("active-class").textContent =
    `step ${latest.step}: ${latest.meta_class ?? "weighted total"} (${latest.reason}, strategy ${latest.strategy})`;
  for (const d of schedule) {
    const color = d.meta_class ? classColor(d.meta_class) : null;
    strip.append(el("span", { "data-step": d.step, title: `step ${d.step}: ${d.reason}`, style: color ? `background:${color};color:#fff` : null },
      `${d.step}: ${d.meta_class ?? "total"}`));
  }
}

function drawCanaries(canaries, since) {
  const box = document.querySelector("#canaries .chart");
  const note = document.getElementById("canary-note");
  if (!canaries.length) {
    box.replaceChildren();
    note.className = "note";
    note.textContent = "no canaries: this run has no labelled set (RUBRICD_CANARY_SET, rubricd judge canaries)";
    return;
  }
  const xs = canaries.map((c) => c.step);
  lineChart(box, xs, [
    { name: "agreement", values: canaries.map((c) => c.agreement), width: 3, color: COLORS[0] },
    { name: "baseline", values: canaries.map((c) => c.baseline), width: 1.5, dash: "5 3", color: "#555" },
  ], 0, 1);
  for (const c of canaries.filter((c) => c.drift)) {
    const circle = box.querySelector(`g[data-series="agreement"] circle[data-step="${c.step}"]`);
    if (circle) {
      circle.setAttribute("fill", "#b3261e");
      circle.setAttribute("r", 5);
      circle.classList.add("drift");
    }
  }
  const latest = canaries[canaries.length - 1];
  note.className = since === null ? "note" : "note drift";
  note.textContent = `step ${latest.step}: agreement ${fmt(latest.agreement, 2)} over ${latest.verdicts} verdicts` +
    (latest.baseline === null ? "" : `, baseline ${fmt(latest.baseline, 2)}`) +
    (since === null ? "" : ` · judge drift since step ${since}`);
}

const PHASE_COLORS = { generator: "#1d4ed8", judge: "#b45309", both: "#555" };

function drawArm(steps, phases) {
  const box = document.querySelector("#arm .chart");
  const strip = document.querySelector("#arm .strip");
  const note = document.getElementById("arm-note");
  strip.replaceChildren();
  if (!steps.length && !phases.length) {
    box.replaceChildren();
    note.textContent = "no Rubric-ARM rewards: this run trains no rubric generator or judge (rubricd arm)";
    return;
  }
  const xs = steps.map((s) => s.step);
  lineChart(box, xs, [
    { name: "generator reward", values: steps.map((s) => s.generator_reward), width: 3, color: PHASE_COLORS.generator },
    { name: "judge accuracy", values: steps.map((s) => s.judge_accuracy), width: 3, color: PHASE_COLORS.judge },
  ], Math.min(0, ...steps.map((s) => s.generator_reward ?? 0)), 1);
  for (const d of phases) {
    strip.append(el("span", { "data-step": d.step, "data-training": d.training, title: `step ${d.step}: ${d.phase}`,
      style: `background:${PHASE_COLORS[d.training]};color:#fff` }, `${d.step}: ${d.training}`));
  }
  const latest = phases[phases.length - 1];
  const penalized = steps.reduce((n, s) => n + s.penalized, 0);
  note.textContent = (latest ? `step ${latest.step} trains ${latest.phase}` : "") +
    (penalized ? ` · ${penalized} completions penalized (invalid rubric sets, unparsable verdicts)` : "");
}

function drawRubrics(steps) {
  const box = document.querySelector("#rubrics .heatmap");
  const shown = steps.slice(-30);
  const judged = new Map();
  for (const s of shown) for (const [id, r] of Object.entries(s.rubrics)) judged.set(id, (judged.get(id) ?? 0) + r.judged);
  if (!judged.size) {
    box.replaceChildren(el("p", { class: "note empty" }, "no verdicts recorded yet"));
    return;
  }
  // Per-instance sets (generated rubrics) can name hundreds of rubrics: the most judged first, MAX_RUBRICS rows.
  const ranked = [...judged.keys()];
  const ids = ranked.length > MAX_RUBRICS ? ranked.sort((a, b) => judged.get(b) - judged.get(a)).slice(0, MAX_RUBRICS) : ranked;
  const head = el("tr", {}, el("th", {}, "rubric"), el("th", { class: "num" }, "points"), shown.map((s) => el("th", { class: "num" }, s.step)));
  const rows = ids.map((id) => {
    const points = shown.map((s) => s.rubrics[id]?.points).filter((p) => p !== undefined).pop();
    return el("tr", { "data-rubric": id }, el("td", {}, id), el("td", { class: "num" }, points > 0 ? `+${points}` : points),
      shown.map((s) => {
        const r = s.rubrics[id];
        if (!r) return el("td", {});
        // green when met is good (positive points), red when met is bad (a penalty)
        const good = points >= 0 ? r.met : 1 - r.met;
        const style = `background:hsl(${Math.round(good * 120)},60%,${88 - 20 * Math.abs(good - 0.5)}%)`;
        return el("td", { class: "num", style, title: `step ${s.step}: met by ${Math.round(r.met * r.judged)} of ${r.judged}` }, fmt(r.met, 2));
      }));
  });
  const more = ranked.length - ids.length;
  box.replaceChildren(el("table", {}, el("thead", {}, head), el("tbody", {}, rows)),
    ...(more > 0 ? [el("p", { class: "note" }, `and ${more} less judged rubrics`)] : []));
}

// A rubric no group's responses differ on (all met it, or none) teaches the policy nothing at that step.
function drawHealth(health) {
  const box = document.querySelector("#health .table");
  if (!health) {
    box.replaceChildren(el("p", { class: "note empty" }, "no rubric health counted yet (ok scores of training rollouts)"));
    return;
  }
  const uninformative = health.rubrics.filter((h) => h.uninformative).length;
  const voted = health.rubrics.some((h) => h.voted > 0);
  const head = el("tr", {}, el("th", {}, "rubric"), ["met rate", "rollouts", "groups with spread", ...(voted ? ["votes split"] : [])].map((h) => el("th", { class: "num" }, h)), el("th", {}, ""));
  const rows = health.rubrics.map((h) =>
    el("tr", { "data-rubric": h.rubric_id, class: h.uninformative ? "uninformative" : "" }, el("td", {}, h.rubric_id),
      el("td", { class: "num" }, fmt(h.met_rate, 2)), el("td", { class: "num" }, h.rollouts),
      el("td", { class: "num" }, `${h.groups_with_spread} of ${h.groups}`),
      voted ? el("td", { class: h.votes_split ? "num split" : "num" }, `${h.votes_split} of ${h.voted}`) : null,
      el("td", {}, h.uninformative ? "uninformative" : "")));
  box.replaceChildren(el("p", { class: "note" }, `step ${health.step}: ${uninformative} of ${health.rubrics.length} rubrics uninformative`),
    el("table", {}, el("thead", {}, head), el("tbody", {}, rows)));
}

function drawVersions(versions) {
  const list = document.querySelector("#versions ol");
  list.replaceChildren(
    ...versions.slice().reverse().map((v) => {
      const head = `v${v.version} · ` + (v.step === null ? "seed" : `from step ${v.step}`) +
        (v.strategy ? ` · ${v.strategy}` : "") + ` · ${v.rubrics.length} rubrics · ${day(v.at)}`;
      const changes = v.changes.map((c) =>
        el("li", { class: c.change, "data-rubric": c.rubric_id }, c.text, el("div", { class: "why" }, "why: " + (c.rationale || "(no rationale recorded)"))));
      return el("li", { "data-version": v.version }, el("strong", {}, head),
        v.step !== null && !changes.length ? el("div", { class: "note" }, "no change") : el("ul", {}, changes));
    }),
  );
}

// A run's candidates (promotion gated), newest first: the one in shadow, then each decision with the gate's figures.
function drawCandidates(candidates) {
  const list = document.querySelector("#candidates ol");
  if (!candidates.length) {
    list.replaceChildren(el("li", { class: "note" }, "none: the run's rubric changes take effect at once (promotion immediate)"));
    return;
  }
  const delta = (name, value) => (value === null || value === undefined ? "" : `${name} ${value >= 0 ? "+" : ""}${value.toFixed(3)}`);
  list.replaceChildren(
    ...candidates.slice().reverse().map((c) => {
      const outcome = c.outcome === "in shadow" ? `in shadow until step ${c.until}` :
        `${c.outcome} at step ${c.decided_at_step}` + (c.version ? ` as v${c.version}` : "") + (c.reason ? `: ${c.reason}` : "");
      const head = `proposed after step ${c.step} on v${c.base_version} · ${outcome}`;
      const checks = c.checks.map((k) => {
        const figures = [delta("flagged", k.flagged_delta), delta("honest", k.honest_delta),
          k.groups ? `spread ${k.groups_with_spread}/${k.groups}` : ""].filter((x) => x).join(", ");
        return el("li", { class: k.passed ? "added" : "removed", "data-rubric": k.rubric_id },
          `${k.action} ${k.rubric_id}: ${k.passed ? "passed" : "failed"}` + (figures ? ` (${figures})` : ""),
          k.reasons.length ? el("div", { class: "why" }, k.reasons.join("; ")) : null);
      });
      const shown = checks.length ? checks : c.changes.map((x) => el("li", {}, x));
      if (c.canaries) {
        const k = c.canaries;
        shown.push(el("li", { class: k.passed ? "added" : "removed", "data-canaries": "" },
          `canaries (${k.verdicts} labelled verdicts): agreement ${k.agreement.toFixed(3)} alone, ` +
          `${k.with_candidate.toFixed(3)} with the candidate in the calls: ${k.passed ? "passed" : "failed"}`));
      }
      return el("li", { "data-candidate": c.step, "data-outcome": c.outcome }, el("strong", {}, head), el("ul", {}, shown));
    }),
  );
}

// --- One scored rollout, a trajectory turn by turn ---

const signed = (points) => (points > 0 ? `+${points}` : String(points));

async function readRollout(run, id) {
  const key = `${run}\n${id}`;
  if (state.view?.key !== key) {
    const value = await get(`api/runs/${encodeURIComponent(run)}/rollout?${new URLSearchParams({ id })}`, null);
    state.view = { key, value };
  }
  return state.view.value;
}

// The listed step's rollouts and the one to show: a rollout the page was opened for lists its own step; without
// one, the listed step's first trajectory (else its first rollout), kept while the run goes on. `mine`: as
// refresh's; a refresh overtaken by a later one (a click) picks nothing.
async function pickRollout(run, mine) {
  if (state.rollout && state.rolloutStep === null) {
    const view = await readRollout(run, state.rollout);
    if (view && mine === state.refreshes) state.rolloutStep = view.step;
  }
  const step = state.rolloutStep === null ? "" : `?step=${state.rolloutStep}`;
  const listing = await get(`api/runs/${encodeURIComponent(run)}/rollouts${step}`);
  if (mine !== state.refreshes) return null;
  if (!state.rollout && listing.rollouts.length) {
    state.rollout = (listing.rollouts.find((r) => r.turns) ?? listing.rollouts[0]).rollout_id;
    state.rolloutStep = listing.step;
  }
  return { listing, view: state.rollout ? await readRollout(run, state.rollout) : null };
}

function drawRolloutPicker(steps, listing) {
  const stepSelect = document.getElementById("rollout-step");
  const ids = steps.map((s) => String(s.step));
  if ([...stepSelect.options].map((o) => o.value).join() !== ids.join()) {
    stepSelect.replaceChildren(...ids.map((s) => el("option", { value: s }, s)));
  }
  stepSelect.value = listing.step ?? "";
  const select = document.getElementById("rollout-id");
  const options = listing.rollouts.map((r) => [r.rollout_id,
    `${r.rollout_id} · ${r.turns ? `${r.turns} turns` : "text"} · ` + (r.reward === null ? r.status : `reward ${fmt(r.reward)}`)]);
  if (state.rollout && !options.some(([id]) => id === state.rollout)) options.push([state.rollout, state.rollout]);
  if ([...select.options].map((o) => o.textContent).join("\n") !== options.map(([, text]) => text).join("\n")) {
    select.replaceChildren(...options.map(([id, text]) => el("option", { value: id }, text)));
  }
  select.value = state.rollout ?? "";
  document.getElementById("rollout-more").textContent = listing.more
    ? `and ${listing.more} more rollouts of this step (open one with #run=…&rollout=ID)` : "";
}

function drawToolCall(call) {
  return el("div", { class: "call", "data-call": call.call }, el("span", { class: "label" }, `call ${call.call}: `),
    `${call.tool}(${call.arguments})`, call.problems.map((p) => el("span", { class: "problem" }, p)));
}

function drawTurn(turn) {
  const who = el("div", { class: "who" }, el("strong", {}, `#${turn.turn}`), ` ${turn.role}`,
    turn.name ? ` ${turn.name}` : null, turn.policy ? [" ", el("span", { class: "tag" }, "policy")] : null);
  const body = el("div", { class: "body" },
    turn.reasoning ? el("details", {}, el("summary", {}, "reasoning"), el("div", { class: "text reasoning" }, turn.reasoning)) : null,
    turn.answers ? el("div", { class: "answers" }, el("span", { class: "label" }, `answers ${turn.answers}`)) : null,
    turn.content ? el("div", { class: "text content" }, turn.content) : null,
    turn.tool_calls.map(drawToolCall));
  const verdicts = el("div", { class: "verdicts" },
    turn.points === null ? null : el("div", { class: "turn-points" }, `points ${signed(turn.points)}`),
    // Coloured by what the verdict does to the reward: a penalty met in this turn is bad news, like a rule failed.
    turn.verdicts.map((v) => el("span", { class: `verdict ${v.met ? "met" : "unmet"} ${v.met === v.points >= 0 ? "good" : "bad"}`, "data-rubric": v.rubric_id,
      title: `${v.met ? "met" : "failed"} (${signed(v.points)})` + (v.explanation ? `: ${v.explanation}` : "") },
    `${v.met ? "✓" : "✗"} ${v.rubric_id}`)));
  return el("div", { class: turn.policy ? "turn policy" : "turn", "data-turn": turn.turn, "data-role": turn.role }, who, body, verdicts);
}

function drawResults(results) {
  if (!results.length) return el("p", { class: "note" }, "no verdicts");
  const voted = results.some((r) => r.agreement !== null);
  const head = el("tr", {}, ["rubric", "points", "verdict", ...(voted ? ["votes agreeing"] : []), "turns", "explanation"].map((h) => el("th", {}, h)));
  const turns = (r) => [r.met_turns.length ? `met ${r.met_turns.join(", ")}` : null,
    r.unmet_turns.length ? `failed ${r.unmet_turns.join(", ")}` : null].filter((t) => t).join("; ");
  return el("table", { class: "results" }, el("thead", {}, head), el("tbody", {}, results.map((r) =>
    el("tr", { "data-rubric": r.rubric_id }, el("td", {}, r.rubric_id), el("td", { class: "num" }, signed(r.points)),
      el("td", { class: r.met ? "added" : "removed" }, r.met ? "met" : "not met"),
      voted ? el("td", { class: r.agreement < 1 ? "num split" : "num" }, r.agreement === null ? "-" : fmt(r.agreement)) : null,
      el("td", {}, turns(r)),
      el("td", { class: "wrap" }, r.explanation)))));
}

function drawRollout(view) {
  const box = document.querySelector("#rollout .view");
  const key = view ? `${view.run_id}\n${view.rollout_id}` : state.rollout;
  if (state.drawn === key) return; // a kept rollout never changes: drawn once, so reading and opening details last
  state.drawn = key;
  if (!view) {
    box.replaceChildren(el("p", { class: "note empty" }, state.rollout ? `${state.rollout}: not kept (or trimmed since)` : "no kept rollouts yet"));
    return;
  }
  const head = `${view.rollout_id} · step ${view.step}` + (view.evaluation ? " · evaluation" : "") + ` · ${view.status}` +
    (view.reward === null ? "" : ` · reward ${fmt(view.reward)}`) + ` · rubrics v${view.rubric_version} · ${view.policy}` +
    (view.judge_cached ? " · judge cache" : "") +
    (view.group === null ? "" : ` · group ${view.group}`) +
    (view.grouping ? ` · judged with ${view.grouping.members} as ${view.grouping.label}` : view.group === null ? "" : " · judged alone") +
    (view.votes > 1 ? ` · ${view.votes} votes, agreement ${fmt(view.agreement)}` : "");
  const parts = [el("p", { class: "head" }, el("strong", {}, head), view.error ? el("div", { class: "removed" }, view.error) : null)];
  if (view.trajectory.length) {
    parts.push(el("h3", {}, `Offered tools (${view.tools.length})`), view.tools.length
      ? el("ul", { class: "tools" }, view.tools.map((t) => el("li", { "data-tool": t.name }, el("code", {}, t.name),
        t.description ? ` · ${t.description}` : "", Object.keys(t.parameters).length ? [" · ", el("code", {}, JSON.stringify(t.parameters))] : null)))
      : el("p", { class: "note" }, "none"));
    parts.push(el("h3", {}, `Turns (${view.trajectory.length}; the first ${view.prompt_turns} the policy's input)`),
      el("div", { class: "turns" }, view.trajectory.map(drawTurn)));
  } else {
    parts.push(el("h3", {}, "Prompt"), el("div", { class: "text prompt" }, view.prompt),
      el("h3", {}, "Response"), el("div", { class: "text response" }, view.response));
  }
  if (view.reference !== null) parts.push(el("h3", {}, "Reference"), el("div", { class: "text reference" }, view.reference));
  parts.push(el("h3", {}, "Verdicts"), drawResults(view.results));
  box.replaceChildren(...parts);
}

function drawGroups(groups) {
  const box = document.querySelector("#groups .table");
  if (!groups.length) {
    box.replaceChildren(el("p", { class: "note empty" }, "no consumer groups: no service has started"));
    return;
  }
  const head = el("tr", {}, ["stream", "group", "consumers", "pending", "lag", "oldest pending"].map((h) => el("th", {}, h)));
  const rows = groups.map((g) =>
    el("tr", { "data-group": `${g.stream}/${g.group}` }, el("td", {}, g.stream), el("td", {}, g.group),
      el("td", { class: "num" }, g.consumers), el("td", { class: "num" }, g.pending),
      el("td", { class: g.lag ? "num lagging" : "num" }, g.lag ?? "?"),
      el("td", { class: "num" }, g.oldest_pending_age_s === null ? "–" : `${g.oldest_pending_age_s.toFixed(1)}s`)));
  box.replaceChildren(el("table", {}, el("thead", {}, head), el("tbody", {}, rows)));
}

function drawEvents(events) {
  const select = document.getElementById("event-service");
  for (const e of events) {
    if (!state.services.has(e.service)) {
      state.services.add(e.service);
      select.append(el("option", { value: e.service }, e.service));
    }
  }
  const head = el("tr", {}, ["time", "service", "kind", "run/step/rollout", "detail", "fields"].map((h) => el("th", {}, h)));
  const rows = events.map((e) => {
    const where = [e.run_id, e.step, e.rollout_id].filter((x) => x !== null && x !== undefined).join("/");
    const fields = Object.entries(e.fields || {}).filter(([, v]) => v !== null)
      .map(([k, v]) => `${k}=${typeof v === "number" && !Number.isInteger(v) ? v.toFixed(4) : v}`).join(" ");
    return el("tr", { "data-kind": e.kind, "data-service": e.service }, el("td", {}, clock(e.at)), el("td", {}, e.service),
      el("td", {}, e.kind), el("td", {}, where || "–"), el("td", { class: "wrap" }, e.detail || ""), el("td", { class: "wrap" }, fields));
  });
  document.querySelector("#events .table").replaceChildren(
    events.length ? el("table", {}, el("thead", {}, head), el("tbody", {}, rows)) : el("p", { class: "note empty" }, "no matching events"));
}

// --- Polling ---

// `mine`: the refresh's number; one asked for later (a click while this one waits) draws instead of this one.
async function refresh(mine) {
  try {
    const { runs } = await get("api/runs");
    const select = document.getElementById("run");
    const ids = runs.map((r) => r.run_id);
    // The run the page was opened for stays, even before the run list (read every 15 s) names it.
    if (!state.run) state.run = (runs.find((r) => r.kept_rollouts) || runs[0] || {}).run_id ?? null;
    if (state.run && !ids.includes(state.run)) ids.push(state.run);
    if ([...select.options].map((o) => o.value).join() !== ids.join()) {
      select.replaceChildren(...ids.map((id) => el("option", { value: id }, id)));
    }
    select.value = state.run ?? "";
    const info = runs.find((r) => r.run_id === state.run);
    document.getElementById("run-info").textContent = info
      ? `rubrics v${info.version ?? "–"}` + (info.instance_sets ? ` · ${info.instance_sets} instance sets` : "") +
        ` · ${info.kept_rollouts} kept` + (info.kept_arm_rollouts ? ` · ${info.kept_arm_rollouts} Rubric-ARM rewards` : "") + (info.cost !== null ? ` · $${info.cost.toFixed(4)}` : "")
      : state.run ? "nothing kept yet" : "no runs yet";
    const q = new URLSearchParams({
      run: document.getElementById("event-this-run").checked ? state.run ?? "" : "",
      service: document.getElementById("event-service").value,
      kind: document.getElementById("event-kind").value,
    });
    const asked = state.run;
    const had = state.steps && state.steps.run === asked ? state.steps : null;
    const [run, groups, events, picked] = await Promise.all([
      asked ? get(`api/runs/${encodeURIComponent(asked)}?${new URLSearchParams({ cursor: had ? had.cursor : "" })}`) : null,
      get("api/groups"),
      get(`api/events?${q}`),
      state.run ? pickRollout(state.run, mine) : null,
    ]);
    if (mine !== state.refreshes) return;
    if (run) {
      const rows = new Map(run.partial && had ? had.rows : []);
      for (const row of run.steps) rows.set(row.step, row);
      const versions = new Map(run.partial && had ? had.versions : []);
      for (const v of run.versions) versions.set(v.version, v);
      state.steps = { run: asked, cursor: run.cursor, rows, versions };
      run.steps = [...rows.values()].sort((a, b) => a.step - b.step);
      run.versions = [...versions.values()].sort((a, b) => a.version - b.version);
      const named = [...run.steps.flatMap((s) => Object.keys(s.meta_classes)), ...run.schedule.map((d) => d.meta_class)];
      state.classes = [...new Set(named.filter((c) => c))].sort();
      drawRewards(run.steps);
      drawFailures(run.steps);
      drawSchedule(run.schedule);
      drawCanaries(run.canaries, run.canary_drift_since);
      drawArm(run.arm, run.arm_phases);
      drawRubrics(run.steps);
      drawHealth(run.health);
      drawVersions(run.versions);
      drawCandidates(run.candidates);
      drawRolloutPicker(run.steps, picked.listing);
      drawRollout(picked.view);
    }
    drawGroups(groups);
    drawEvents(events);
    document.getElementById("problem").textContent = "";
    document.getElementById("updated").textContent = "updated " + new Date().toISOString().slice(11, 19) + " UTC";
    document.body.dataset.loaded = "true";
  } catch (e) {
    document.getElementById("problem").textContent = String(e);
  }
}

let timer = null;
function soon(delay = 0) {
  clearTimeout(timer);
  const mine = ++state.refreshes;
  timer = setTimeout(async () => {
    await refresh(mine);
    if (mine === state.refreshes) soon(REFRESH_MS); // else a later refresh keeps the polling going
  }, delay);
}

document.getElementById("event-kind").append(...EVENT_KINDS.map((k) => el("option", { value: k }, k)));
document.getElementById("run").addEventListener("change", (e) => {
  state.run = e.target.value;
  Object.assign(state, { rollout: null, rolloutStep: null });
  location.hash = new URLSearchParams({ run: state.run });
  soon();
});
document.getElementById("rollout-step").addEventListener("change", (e) => {
  Object.assign(state, { rolloutStep: Number(e.target.value), rollout: null });
  soon();
});
document.getElementById("rollout-id").addEventListener("change", (e) => {
  state.rollout = e.target.value;
  location.hash = new URLSearchParams({ run: state.run, rollout: state.rollout });
  soon();
});
for (const id of ["event-this-run", "event-service", "event-kind"]) document.getElementById(id).addEventListener("change", () => soon());
soon();
