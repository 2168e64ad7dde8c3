// Vote page (Defuse Figure 15): one generated image, a button per class and "none of the above".
// A free-text set (segmentation failure scenarios) also takes a name the rater types.
// Votes go to the outbox (common.js), kept until the server acknowledges them, so a network cut
// loses none; a vote the server rejects brings the page back to that item with the reason.
"use strict";
(() => {
  BS.outbox.hold();
  const $ = (id) => document.getElementById(id);
  let flat = [], idx = 0;
  const find = (set, id) => flat.find((x) => x.set === set && x.id === id);
  function progress() { $("progress").textContent = `${flat.filter((x) => x.done).length} / ${flat.length}`; }
  function show() {
    if (!flat.length) { $("empty").hidden = false; $("vote-view").hidden = true; return; }
    idx = Math.max(0, Math.min(idx, flat.length - 1));
    const it = flat[idx];
    $("vote-img").src = `/api/images/vote?${BS.q({ set: it.set, id: it.id })}`;
    $("item").textContent = `${it.set} · ${it.id}`;
    if (it.prompt) $("prompt").textContent = it.prompt;  // a set's own question (segmentation scenarios)
    else $("prompt").innerHTML = "What is in this image? Choose the class, or <i>none of the above</i>.";
    const box = $("choices"); box.replaceChildren();
    it.classes.forEach((n, k) => box.append(button(n, k < 10 ? String(k % 10) : "", it.label === n)));
    box.append(button("none", "N", it.done && it.label === null, "None of the above"));
    // The typed name: shown for free-text sets, pre-filled with the rater's own earlier name.
    $("name-form").hidden = !it.free_text;
    const own = it.done && it.label !== null && !it.classes.includes(it.label) ? it.label : "";
    $("name").value = own;
    $("name-form").classList.toggle("chosen", own !== "");
    progress();
    const nxt = flat[idx + 1];
    if (nxt) { const im = new Image(); im.src = `/api/images/vote?${BS.q({ set: nxt.set, id: nxt.id })}`; }
    document.body.dataset.index = String(idx);
  }
  function button(label, key, chosen, text) {
    const b = document.createElement("button");
    b.className = "choice" + (chosen ? " chosen" : ""); b.dataset.label = label;
    b.textContent = (text || label) + (key && key !== label ? ` (${key})` : "");
    b.addEventListener("click", () => vote(label));
    return b;
  }
  function vote(label) {
    const it = flat[idx];
    it.done = true; it.label = label === "none" ? null : label;
    BS.outbox.add("vote", "/api/votes", { set: it.set, item_id: it.id, label });
    const nxt = flat.findIndex((x, j) => j > idx && !x.done);
    idx = nxt >= 0 ? nxt : idx; show();
  }
  BS.outbox.onAck((e, r) => {
    if (e.kind !== "vote") return;
    const it = find(e.body.set, e.body.item_id);
    if (it) { it.confirmed = r.label === "none" ? null : r.label; }
    $("saved").textContent = `saved ${e.body.item_id}`;
  });
  BS.outbox.onReject((e, err) => {
    if (e.kind !== "vote") return;
    BS.flash(`Vote for ${e.body.item_id} was NOT saved — ${err.status}: ${err.message}`, true);
    const it = find(e.body.set, e.body.item_id);
    if (!it) return;
    it.label = it.confirmed === undefined ? null : it.confirmed; it.done = it.confirmed !== undefined;
    idx = flat.indexOf(it); show();
  });
  document.addEventListener("keydown", (e) => {
    if (BS.typing(e) || e.ctrlKey || e.metaKey || e.altKey || !flat.length) return;
    const it = flat[idx], k = e.key;
    if (k >= "0" && k <= "9") { const c = Number(k); if (c < it.classes.length) vote(it.classes[c]); }
    else if (k === "n" || k === "N") vote("none");
    else if (k === "ArrowRight") { idx += 1; show(); }
    else if (k === "ArrowLeft") { idx -= 1; show(); }
  });
  document.addEventListener("DOMContentLoaded", async () => {
    $("name-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const name = $("name").value.trim();
      if (!name) { $("name").focus(); return; }
      $("name").blur();  // the keys (0-9, N, arrows) work again on the next item
      vote(name);
    });
    const q = await BS.api("GET", "/api/votes/queue");
    flat = q.sets.flatMap((s) => s.items.map((x) => ({ ...x, set: s.set, classes: s.classes, prompt: s.prompt,
                                                       free_text: !!s.free_text })));
    flat.forEach((x) => { if (x.done) x.confirmed = x.label; });
    // Votes an earlier visit left unsent are still votes: show them, then send them.
    for (const e of BS.outbox.pending("vote")) {
      const it = find(e.body.set, e.body.item_id);
      if (it) { it.done = true; it.label = e.body.label === "none" ? null : e.body.label; }
    }
    const first = flat.findIndex((x) => !x.done); idx = first >= 0 ? first : 0;
    show(); BS.outbox.flush(); document.body.dataset.ready = "1";
  });
})();
