// Review page: image, given mask, predicted mask, flagged regions outlined; a verdict per
// region; a confirmed error links to the label page to fix the mask. Verdicts go to the outbox
// (common.js): kept until the server acknowledges them; a rejected one brings the page back.
"use strict";
(() => {
  BS.outbox.hold();
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg", MAX_BOXES = 12;
  let images = [], idx = 0, sel = 0, classes = null, opacity = 55, zoomed = false;
  const key = (set, id) => `${set}\u0000${id}`;
  const byKey = new Map();
  function name(k) { return classes && k < classes.names.length ? classes.names[k] : (k === 255 ? "unlabeled" : String(k)); }
  function progress() {
    // Regions, not whole images: a half-reviewed image counts for what was judged.
    const regions = images.flatMap((x) => x.regions);
    const judged = regions.filter((r) => r.verdict).length;
    images.forEach((x) => { x.done = x.regions.every((r) => r.verdict); });
    const full = images.filter((x) => x.done).length;
    $("progress").textContent = `${judged} / ${regions.length}`;
    $("images-done").textContent = `regions judged · ${full} / ${images.length} images complete`;
    const all = images.length > 0 && full === images.length;
    $("finished").hidden = !all;
    document.body.dataset.finished = all ? "1" : "0";
  }
  function error(msg) { $("answer-error").textContent = msg; $("answer-error").hidden = !msg; }
  function show() {
    if (!images.length) { $("empty").hidden = false; $("review-view").hidden = true; progress(); return; }
    $("review-view").hidden = false;
    idx = Math.max(0, Math.min(idx, images.length - 1));
    const it = images[idx];
    sel = Math.max(0, Math.min(sel, it.regions.length - 1));
    $("image-id").textContent = `${it.set} · ${it.id}`;
    document.querySelectorAll("#review-view img").forEach((im) => {
      const src = `/api/images/review?${BS.q({ set: it.set, id: it.id, layer: im.dataset.layer })}`;
      if (im.getAttribute("src") !== src) im.src = src;
      im.onload = () => { drawBoxes(); zoomToRegion(); };
    });
    const tb = $("regions"); tb.replaceChildren();
    it.regions.forEach((r, j) => {
      const tr = document.createElement("tr"); tr.dataset.region = r.region;
      if (j === sel) tr.classList.add("selected");
      const state = r.verdict === "error" ? "error confirmed" : (r.verdict === "fine" ? "label is fine" : "–");
      const cells = [r.region, r.kind.replace("_", " "), `${name(r.given)} → ${name(r.predicted)}`, r.area, r.score.toFixed(3),
        state + (r.unsent ? " (not saved yet)" : "")];
      cells.forEach((c) => { const td = document.createElement("td"); td.textContent = c; tr.append(td); });
      const td = document.createElement("td");
      const be = document.createElement("button"); be.textContent = "Confirm error (E)"; be.className = "verdict-error";
      be.classList.toggle("chosen", r.verdict === "error");
      be.addEventListener("click", () => verdict(j, "error"));
      const bf = document.createElement("button"); bf.textContent = "Label is fine (F)"; bf.className = "verdict-fine";
      bf.classList.toggle("chosen", r.verdict === "fine");
      bf.addEventListener("click", () => verdict(j, "fine"));
      td.append(be, bf);
      if (r.verdict === "error") {
        const a = document.createElement("a"); a.className = "fix";
        a.href = `/label?${BS.q({ kind: "fix", ref: it.set, id: it.id })}`; a.textContent = "fix the mask →"; td.append(a);
      }
      tr.append(td); tr.addEventListener("click", (e) => { if (e.target.tagName !== "BUTTON" && e.target.tagName !== "A") { sel = j; show(); } });
      tb.append(tr);
    });
    progress(); drawBoxes(); zoomToRegion(); revealRow(tb.children[sel]);
    document.body.dataset.index = String(idx);
  }
  // Keep the selected row visible in the regions box (scrolling the box only, never the page).
  function revealRow(tr) {
    const box = $("regions-box");
    if (!tr || !box) return;
    const b = box.getBoundingClientRect(), r = tr.getBoundingClientRect();
    const top = b.top + box.querySelector("thead").offsetHeight;  // below the sticky header
    if (r.top < top) box.scrollTop -= top - r.top;
    else if (r.bottom > b.top + box.clientHeight) box.scrollTop += r.bottom - (b.top + box.clientHeight);
  }
  function drawBoxes() {
    const it = images[idx]; if (!it) return;
    document.querySelectorAll("#review-view .frame").forEach((f) => {
      const im = f.querySelector("img"), svg = f.querySelector("svg");
      const w = im.naturalWidth || 1, h = im.naturalHeight || 1;
      svg.setAttribute("viewBox", `0 0 ${w} ${h}`); svg.replaceChildren();
      // A real photo can have hundreds of regions: their boxes hid the image. Draw the first
      // MAX_BOXES (the ranking's top) and the selected one, last so it is on top.
      const shown = it.regions.map((r, j) => [r, j]).filter(([, j]) => j < MAX_BOXES && j !== sel);
      if (it.regions[sel]) shown.push([it.regions[sel], sel]);
      shown.forEach(([r, j]) => {
        const rect = document.createElementNS(SVG, "rect");
        rect.setAttribute("x", r.box[0]); rect.setAttribute("y", r.box[1]);
        rect.setAttribute("width", r.box[2] - r.box[0]); rect.setAttribute("height", r.box[3] - r.box[1]);
        rect.setAttribute("class", "box" + (j === sel ? " selected" : "") + (r.verdict ? ` ${r.verdict}` : ""));
        svg.append(rect);
      });
    });
  }
  function verdict(j, v) {
    const it = images[idx], r = it && it.regions[j];
    if (!r) return;
    r.verdict = v; r.unsent = (r.unsent || 0) + 1;
    error("");
    BS.outbox.add("review", "/api/reviews", { set: it.set, image_id: it.id, region: r.region, verdict: v });
    const nxt = it.regions.findIndex((x) => !x.verdict);
    sel = nxt >= 0 ? nxt : j;
    if (nxt < 0) $("saved").textContent = "every region of this image is judged — → for the next image";
    show();
  }
  function region(body) {
    const it = byKey.get(key(body.set, body.image_id));
    return it ? [it, it.regions.find((x) => x.region === body.region)] : [null, null];
  }
  BS.outbox.onAck((e, out) => {
    if (e.kind !== "review") return;
    const [it, r] = region(e.body);
    if (!r) return;
    r.unsent = Math.max(0, (r.unsent || 0) - 1); r.confirmed = e.body.verdict;
    $("saved").textContent = `saved region ${r.region} of ${it.id}` + (out && out.fix_url ? " — fix the mask on the label page" : "");
    if (it === images[idx]) show(); else progress();
  });
  BS.outbox.onReject((e, err) => {
    if (e.kind !== "review") return;
    error(`Verdict “${e.body.verdict}” on region ${e.body.region} of ${e.body.image_id} was NOT saved — ${err.status}: ${err.message}`);
    const [it, r] = region(e.body);
    if (!r) return;
    r.unsent = Math.max(0, (r.unsent || 0) - 1);
    if (!r.unsent) r.verdict = r.confirmed || null;
    idx = images.indexOf(it); sel = it.regions.indexOf(r); show();
  });
  // Z: zoom all three frames onto the selected region (a 64-px region of a 1280x1024 photo is a few
  // screen pixels at the fitted size); Z again: the whole image.
  function zoomToRegion() {
    const tri = document.querySelector(".triple"), it = images[idx], r = it && it.regions[sel];
    const frames = [...document.querySelectorAll("#review-view .frame")];
    const im = frames[0] && frames[0].querySelector("img");
    if (!zoomed || !r || !im || !im.naturalWidth) {
      tri.style.setProperty("--zoom", "1"); document.body.dataset.zoom = "1"; return;
    }
    const nw = im.naturalWidth, nh = im.naturalHeight, fw = frames[0].clientWidth, fh = frames[0].clientHeight;
    const fit = Math.min(fw / nw, fh / nh), bw = Math.max(1, r.box[2] - r.box[0]);
    const bh = Math.max(1, r.box[3] - r.box[1]);
    const z = Math.max(1, Math.min(16, 0.4 * Math.min(fw / (bw * fit), fh / (bh * fit))));
    tri.style.setProperty("--zoom", String(z)); document.body.dataset.zoom = z.toFixed(2);
    frames.forEach((f) => {  // the img box is the frame's size times z; object-fit: contain centres the photo in it
      const W = f.clientWidth * z, H = f.clientHeight * z, s = Math.min(W / nw, H / nh);
      const cx = (W - nw * s) / 2 + (r.box[0] + r.box[2]) / 2 * s;
      const cy = (H - nh * s) / 2 + (r.box[1] + r.box[3]) / 2 * s;
      f.scrollLeft = cx - f.clientWidth / 2; f.scrollTop = cy - f.clientHeight / 2;
    });
  }
  function applyOpacity() {
    document.querySelector(".triple").style.setProperty("--overlay-opacity", String(opacity / 100));
    $("opacity").value = String(opacity);
  }
  document.addEventListener("keydown", (e) => {
    if (BS.typing(e) || e.ctrlKey || e.metaKey || e.altKey || !images.length) return;
    const k = e.key;
    if (k === "e" || k === "E") verdict(sel, "error");
    else if (k === "f" || k === "F") verdict(sel, "fine");
    else if (k === "ArrowDown") { sel += 1; show(); e.preventDefault(); }
    else if (k === "ArrowUp") { sel -= 1; show(); e.preventDefault(); }
    else if (k === "ArrowRight") { idx += 1; sel = 0; show(); e.preventDefault(); }
    else if (k === "ArrowLeft") { idx -= 1; sel = 0; show(); e.preventDefault(); }
    else if (k === "z" || k === "Z") { zoomed = !zoomed; zoomToRegion(); }
    else if (k === "[") { opacity = Math.max(0, opacity - 10); applyOpacity(); }
    else if (k === "]") { opacity = Math.min(100, opacity + 10); applyOpacity(); }
  });
  document.addEventListener("DOMContentLoaded", async () => {
    $("prev").addEventListener("click", () => { idx -= 1; sel = 0; show(); });
    $("next").addEventListener("click", () => { idx += 1; sel = 0; show(); });
    $("opacity").addEventListener("input", (e) => { opacity = Number(e.target.value); applyOpacity(); });
    $("opacity").addEventListener("change", (e) => e.target.blur());
    let q;
    try { q = await BS.api("GET", "/api/reviews/queue"); }
    catch (err) { error(`The queue could not be loaded (${err.message}). Reload the page to try again.`); BS.outbox.flush(); return; }
    classes = q.classes;
    images = q.sets.flatMap((s) => s.images.map((x) => ({ ...x, set: s.set })));
    images.forEach((x) => { byKey.set(key(x.set, x.id), x); x.regions.forEach((r) => { r.confirmed = r.verdict; r.unsent = 0; }); });
    for (const e of BS.outbox.pending("review")) {  // verdicts an earlier visit left unsent
      const [, r] = region(e.body);
      if (r) { r.verdict = e.body.verdict; r.unsent += 1; }
    }
    progress();
    const first = images.findIndex((x) => !x.done); idx = first >= 0 ? first : 0;
    if (images.length) sel = Math.max(0, images[idx].regions.findIndex((x) => !x.verdict));
    applyOpacity();
    show(); BS.outbox.flush(); document.body.dataset.ready = "1";
  });
})();
