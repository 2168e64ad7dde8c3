// Mask editor: starts from the target's prediction (annotators correct, not draw). Tools, each on a
// key: brush, eraser (paints "unlabeled", 255), flood fill, polygon, superpixel brush (SLIC
// regions from the server), "take the competitor's region" (its connected class region under the
// cursor); class picker 1-9/0, opacity, undo/redo; the canvas fits the viewport, wheel zooms, Space+drag
// or the middle button pans. Saves the class ids (uint8 [H, W]); the server stores an index PNG.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const T = LabelTools;
  const IGNORE = 255;
  let classes = null, rgb = [], queue = [], cur = null;
  let W = 0, H = 0, mask = null, tool = "brush", cls = 0, size = 6, dirty = false, edits = 0;
  let segs = null, segIdx = null, levels = {}, level = "coarse", comps = [], compAt = 0, poly = [];
  const view = { scale: 1, tx: 0, ty: 0, fitted: true };
  const undoStack = [], redoStack = [];
  let canvas, ctx, imageData, pctx, pData;

  function hexToRgb(h) { return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); }
  function b64bytes(b64) {
    const raw = atob(b64), bytes = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
    return bytes;
  }
  // The server zlib's big arrays (`encoding: "deflate"`): a 1280x1024 photo's maps are ~0.1 MB, not 3.4 MB of JSON.
  async function inflate(b64, encoding) {
    const bytes = b64bytes(b64);
    if (encoding !== "deflate") return bytes;
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }
  // base64 text or raw bytes -> Uint8Array, or Uint16Array of little-endian pairs
  function decode(data, Type = Uint8Array) {
    const bytes = typeof data === "string" ? b64bytes(data) : data;
    if (Type === Uint8Array) return bytes;
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength), out = new Type(bytes.length / 2);
    for (let i = 0; i < out.length; i++) out[i] = dv.getUint16(2 * i, true);  // little-endian
    return out;
  }
  function render(b = [0, 0, W, H]) {
    const [x0, y0, x1, y1] = b, d = imageData.data;
    for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) {
      const i = y * W + x, v = mask[i], o = i * 4;
      if (v === IGNORE || v >= rgb.length) { d[o + 3] = 0; continue; }
      const c = rgb[v]; d[o] = c[0]; d[o + 1] = c[1]; d[o + 2] = c[2]; d[o + 3] = 255;
    }
    ctx.putImageData(imageData, 0, 0, x0, y0, x1 - x0, y1 - y0);
  }
  function setDirty(d) { dirty = d; $("unsaved").hidden = !d; }
  function changed(b) {
    if (b) { render(b); setDirty(true); }
    edits += 1; document.body.dataset.edits = String(edits);
  }
  // Whole-mask snapshots: at most 100, and at most ~64 MB (48 steps of a 1280x1024 photo, not 131 MB).
  function pushUndo() {
    undoStack.push(mask.slice());
    while (undoStack.length > Math.max(10, Math.min(100, Math.floor(64e6 / mask.length)))) undoStack.shift();
    redoStack.length = 0;
  }
  function status(t) { $("status").textContent = t; }
  function toPixel(e) {
    const r = canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * W / r.width, (e.clientY - r.top) * H / r.height];
  }
  function inside(x, y) { return x >= 0 && y >= 0 && x < W && y < H; }

  // ---- view: fit, zoom at the cursor, pan ----------------------------------------------------
  function sizeViewport() {
    const vp = $("viewport"), top = vp.getBoundingClientRect().top + window.scrollY;
    vp.style.height = `${Math.max(240, window.innerHeight - top - 14)}px`;
  }
  function applyView() {
    const box = $("canvas-box");
    box.style.width = `${W * view.scale}px`; box.style.height = `${H * view.scale}px`;
    box.style.left = `${view.tx}px`; box.style.top = `${view.ty}px`;
  }
  function fit() {
    if (!W) return;
    const vp = $("viewport"), vw = vp.clientWidth, vh = vp.clientHeight;
    view.scale = Math.max(0.05, Math.min(vw / W, vh / H) * 0.98);
    view.tx = (vw - W * view.scale) / 2; view.ty = (vh - H * view.scale) / 2; view.fitted = true;
    applyView();
  }
  function zoomAt(factor, cx, cy) {
    const vp = $("viewport").getBoundingClientRect();
    const mx = cx === undefined ? vp.width / 2 : cx - vp.left, my = cy === undefined ? vp.height / 2 : cy - vp.top;
    const s = Math.min(64, Math.max(0.05, view.scale * factor)), k = s / view.scale;
    view.tx = mx - (mx - view.tx) * k; view.ty = my - (my - view.ty) * k; view.scale = s; view.fitted = false;
    applyView();
  }

  // ---- layers: superpixel edges, the competitor's region under the cursor -----------------------
  function drawEdges() {
    const ec = $("edges");
    if (!segs || tool !== "superpixel") { ec.hidden = true; return; }
    const k = Math.max(1, Math.min(8, Math.floor(1600 / Math.max(W, H))));
    ec.width = W * k; ec.height = H * k; ec.hidden = false;
    const ectx = ec.getContext("2d"), img = ectx.createImageData(W * k, H * k), d = img.data;
    const dot = (px, py) => { const o = (py * W * k + px) * 4; d[o] = 255; d[o + 1] = 255; d[o + 2] = 255; d[o + 3] = 200; };
    for (let y = 0; y < H; y++) for (let x = 0; x < W; x++) {
      const s = segs[y * W + x];
      if (x + 1 < W && segs[y * W + x + 1] !== s) for (let j = 0; j < k; j++) dot((x + 1) * k - 1, y * k + j);
      if (y + 1 < H && segs[(y + 1) * W + x] !== s) for (let j = 0; j < k; j++) dot(x * k + j, (y + 1) * k - 1);
    }
    ectx.putImageData(img, 0, 0);
  }
  let previewKey = -1;
  function clearPreview() { if (pData) { pData.data.fill(0); pctx.putImageData(pData, 0, 0); } previewKey = -1; }
  function previewCompetitor(x, y) {
    const c = comps[compAt];
    if (tool !== "competitor" || !c || !inside(x, y)) { if (previewKey !== -1) clearPreview(); return; }
    const xi = Math.floor(x), yi = Math.floor(y), key = yi * W + xi;
    if (previewKey >= 0 && c.mask[previewKey] === c.mask[key] && c.region && c.region[key]) return;
    pData.data.fill(0);
    const idx = T.component(c.mask, W, H, xi, yi), v = c.mask[key];
    // membership as bytes, not a Set: a region of a 1280x1024 photo can hold a million pixels
    if (!c.region || c.region.length !== W * H) c.region = new Uint8Array(W * H); else c.region.fill(0);
    for (const i of idx) c.region[i] = 1;
    const col = v < rgb.length ? rgb[v] : [255, 255, 255];
    for (const i of idx) { const o = i * 4; pData.data[o] = col[0]; pData.data[o + 1] = col[1]; pData.data[o + 2] = col[2]; pData.data[o + 3] = 255; }
    pctx.putImageData(pData, 0, 0); previewKey = key;
  }
  function showCursor(x, y) {
    const cEl = $("cursor"), brushy = tool === "brush" || tool === "eraser";
    cEl.setAttribute("r", brushy ? String(Math.max(0.5, size / 2)) : "0");
    cEl.setAttribute("cx", String(x)); cEl.setAttribute("cy", String(y));
  }
  function showHover(x, y) {
    let t = "";
    if (inside(x, y)) {
      const v = mask[Math.floor(y) * W + Math.floor(x)];
      t = `under cursor: ${v === IGNORE ? "unlabeled" : (classes.names[v] || v)}`;
    }
    $("hover").textContent = t;
  }
  function drawPoly(hover) {
    const pts = hover && poly.length ? poly.concat([hover]) : poly;
    $("poly").setAttribute("points", pts.map((p) => `${p[0]},${p[1]}`).join(" "));
  }
  // The right end of the info bar: what the current tool will use.
  function toolHint() {
    const c = comps[compAt];
    let t = "";
    if (tool === "superpixel") t = `superpixels: ${level} (G again: ${level === "coarse" ? "fine" : "coarse"})`;
    else if (tool === "competitor") t = comps.length ? `competitor: ${c.name} (${compAt + 1}/${comps.length}, K: next)`
      : "no competitor map for this image";
    else if (tool === "polygon") t = "polygon: Enter or double-click fills, Esc cancels";
    $("hint").textContent = t;
  }

  // ---- tools --------------------------------------------------------------------------------------
  // A tool's key or button; the superpixel tool's again switches coarse <-> fine superpixels.
  function pickTool(t) {
    if (t === "superpixel" && tool === "superpixel" && cur) fetchLevel(cur, level === "coarse" ? "fine" : "coarse");
    else setTool(t);
  }
  function setTool(t) {
    if (t !== "polygon" && poly.length) { poly = []; drawPoly(); }
    tool = t;
    document.querySelectorAll(".tool").forEach((b) => b.classList.toggle("active", b.dataset.tool === t));
    drawEdges(); clearPreview(); showCursor(-10, -10); toolHint();
    document.body.dataset.tool = t;
  }
  // Superpixels at a level ("coarse" or "fine"), fetched once per image and level.
  async function fetchLevel(it, lv) {
    if (!levels[lv]) {
      const sp = await BS.api("GET", `/api/labels/superpixels?${params(it)}&${BS.q({ level: lv, compress: 1 })}`, undefined, { quiet: true })
        .catch(() => null);
      if (cur !== it) return;
      const labels = sp ? decode(await inflate(sp.labels, sp.encoding), Uint16Array) : null;
      if (cur !== it) return;
      levels[lv] = { segs: labels, idx: sp ? T.segmentIndex(labels, sp.n) : null };
    }
    level = lv; segs = levels[lv].segs; segIdx = levels[lv].idx;
    document.body.dataset.level = lv;
    drawEdges(); toolHint();
  }
  function setClass(k) {
    cls = k; if (tool === "eraser") setTool("brush");
    document.querySelectorAll(".cls").forEach((b) => b.classList.toggle("active", Number(b.dataset.k) === k));
    document.body.dataset.cls = String(k);
  }
  function setSize(s) { size = Math.max(1, Math.min(64, s)); $("size").value = size; $("size-value").textContent = size; }
  function setOpacity(o) {
    o = Math.max(0, Math.min(100, o)); $("opacity").value = o;
    canvas.style.opacity = String(o / 100); $("preview").style.opacity = String(Math.max(0.5, o / 100));
  }
  function closePolygon() {
    if (poly.length >= 3) { pushUndo(); changed(T.polygon(mask, W, H, poly, cls)); }
    poly = []; drawPoly();
  }
  let segStroke = null;
  function fillSegment(x, y) {
    if (!segs || !inside(x, y)) return null;
    const s = segs[Math.floor(y) * W + Math.floor(x)];
    if (segStroke.has(s)) return null;
    segStroke.add(s);
    return T.setIndices(mask, W, segIdx[s], cls);
  }
  function adoptAt(x, y) {
    const c = comps[compAt];
    if (!c) { BS.flash("no competitor map for this image", true); return; }
    pushUndo(); changed(T.adopt(mask, c.mask, W, H, Math.floor(x), Math.floor(y)));
    previewKey = -1; c.region = null;
  }
  function undo() { if (!undoStack.length) return; redoStack.push(mask.slice()); mask = undoStack.pop(); setDirty(true); render(); changed(null); }
  function redo() { if (!redoStack.length) return; undoStack.push(mask.slice()); mask = redoStack.pop(); setDirty(true); render(); changed(null); }

  // ---- queue, open, save ----------------------------------------------------------------------------
  function drawQueue() {
    const ol = $("queue"); ol.replaceChildren();
    const done = queue.filter((x) => x.done).length;
    $("progress").textContent = `${done} / ${queue.length}`;
    queue.forEach((it) => {
      const li = document.createElement("li"), a = document.createElement("a");
      a.href = `/label?${BS.q({ kind: it.kind, ref: it.ref, id: it.id })}`;
      a.textContent = (it.kind === "fix" ? `fix ${it.ref}: ` : "") + it.id;
      a.addEventListener("click", (e) => { e.preventDefault(); if (leaveOk()) { open(it); history.replaceState(null, "", a.href); } });
      li.append(a); if (it.done) li.classList.add("done");
      if (cur && it.kind === cur.kind && it.ref === cur.ref && it.id === cur.id) { li.classList.add("current"); setTimeout(() => li.scrollIntoView({ block: "nearest" }), 0); }
      ol.append(li);
    });
  }
  function leaveOk() { return !dirty || confirm("This mask has unsaved changes. Leave it?"); }
  function params(it) { return BS.q({ kind: it.kind, ref: it.ref, id: it.id }); }
  async function load(it, start) {
    const s = await BS.api("GET", `/api/labels/start?${params(it)}&${BS.q({ start, compress: 1 })}`);
    s.mask = await inflate(s.mask, s.encoding);  // bytes from here on
    return s;
  }
  async function open(it, start = "auto") {
    cur = it; document.body.dataset.loaded = ""; document.body.dataset.photo = "";
    levels = {};
    const src = it.kind === "round" ? `/api/images/pool?${BS.q({ id: it.id })}`
      : `/api/images/review?${BS.q({ set: it.ref, id: it.id, layer: "image" })}`;
    new Image().src = src;  // the photo downloads while the server computes superpixels (big photos: both take a while)
    const [s, , cm] = await Promise.all([
      load(it, start),
      fetchLevel(it, level),
      BS.api("GET", `/api/labels/competitors?${params(it)}&${BS.q({ compress: 1 })}`, undefined, { quiet: true })
        .then(async (cm) => { for (const m of cm.models) m.mask = await inflate(m.mask, cm.encoding); return cm; })
        .catch(() => ({ models: [] })),
    ]);
    if (cur !== it) return;  // another image was opened meanwhile
    const sizeChanged = s.width !== W || s.height !== H;
    W = s.width; H = s.height; mask = decode(s.mask);
    canvas.width = W; canvas.height = H; imageData = ctx.createImageData(W, H);
    const pv = $("preview"); pv.width = W; pv.height = H; pData = pctx.createImageData(W, H);
    comps = cm.models.map((m) => ({ name: m.name, mask: decode(m.mask) })); compAt = 0;
    $("overlay").setAttribute("viewBox", `0 0 ${W} ${H}`);
    $("base").onload = () => { if (cur === it) document.body.dataset.photo = it.id; };
    $("base").src = src;
    undoStack.length = 0; redoStack.length = 0; setDirty(false); poly = []; drawPoly();
    render(); if (sizeChanged || view.fitted) fit(); drawEdges(); clearPreview(); drawQueue(); toolHint();
    const from = { prediction: "the target's prediction", stored: "the saved mask", given: "the given label", empty: "an empty mask" };
    status(`${it.id}: ${W}×${H}, starting from ${from[s.source] || s.source}` + (segs ? "" : " (no superpixels)"));
    document.body.dataset.source = s.source;
    document.body.dataset.loaded = it.id;
  }
  async function save() {
    if (!cur || !mask) return null;
    let bin = "";
    for (let i = 0; i < mask.length; i += 0x8000) bin += String.fromCharCode.apply(null, mask.subarray(i, i + 0x8000));
    let r;
    try {
      r = await BS.api("POST", "/api/labels", { kind: cur.kind, ref: cur.ref, image_id: cur.id, width: W, height: H, mask: btoa(bin) });
    } catch (e) {  // the mask stays here, marked unsaved; the page does not move on
      status(`NOT saved (${e.message}): the mask is still here, press S to try again`);
      return null;
    }
    cur.done = true; setDirty(false); drawQueue();
    status(`saved ${cur.id}`); BS.flash(`saved ${cur.id}`);
    document.body.dataset.saved = cur.id;
    return r;
  }
  async function saveNext() {
    const it = cur;
    if (!(await save())) return;
    const at = queue.indexOf(it), next = queue.slice(at + 1).concat(queue.slice(0, at)).find((x) => !x.done);
    if (!next) { status("every image in the queue has a mask now"); BS.flash("queue finished: every image has a mask"); return; }
    history.replaceState(null, "", `/label?${params(next)}`);
    await open(next);
  }

  // ---- events ----------------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", async () => {
    canvas = $("mask"); ctx = canvas.getContext("2d"); pctx = $("preview").getContext("2d");
    const vp = $("viewport");
    let drawing = false, last = null, pan = null, spaceDown = false;
    vp.addEventListener("pointerdown", (e) => {
      if (!mask) return;
      if (e.button === 1 || spaceDown) {  // pan
        pan = [e.clientX, e.clientY, view.tx, view.ty]; vp.classList.add("panning");
        vp.setPointerCapture(e.pointerId); e.preventDefault(); return;
      }
      if (e.button !== 0) return;
      const [x, y] = toPixel(e);
      if (!inside(x, y)) return;
      if (tool === "polygon") { poly.push([x, y]); drawPoly(); return; }
      if (tool === "competitor") { adoptAt(x, y); return; }
      pushUndo();
      if (tool === "fill") { changed(T.flood(mask, W, H, Math.floor(x), Math.floor(y), cls)); return; }
      drawing = true; last = [x, y]; vp.setPointerCapture(e.pointerId);
      if (tool === "superpixel") { segStroke = new Set(); changed(fillSegment(x, y)); return; }
      changed(T.disc(mask, W, H, x, y, size, tool === "eraser" ? IGNORE : cls));
    });
    vp.addEventListener("pointermove", (e) => {
      if (pan) {
        view.tx = pan[2] + e.clientX - pan[0]; view.ty = pan[3] + e.clientY - pan[1]; view.fitted = false; applyView(); return;
      }
      if (!mask) return;
      const [x, y] = toPixel(e);
      showCursor(x, y); showHover(x, y);
      if (tool === "polygon" && poly.length) drawPoly([x, y]);
      if (!drawing) { previewCompetitor(x, y); return; }
      if (tool === "superpixel") {
        const n = Math.max(1, Math.ceil(Math.hypot(x - last[0], y - last[1])));  // every segment the drag crosses
        let b = null;
        for (let k = 1; k <= n; k++) b = T.union(b, fillSegment(last[0] + (x - last[0]) * k / n, last[1] + (y - last[1]) * k / n));
        if (b) { render(b); setDirty(true); }
      } else {
        const b = T.line(mask, W, H, last[0], last[1], x, y, size, tool === "eraser" ? IGNORE : cls);
        if (b) { render(b); setDirty(true); }
      }
      last = [x, y];
    });
    const stop = () => {
      if (pan) { pan = null; vp.classList.remove("panning"); }
      if (drawing) { drawing = false; changed(null); }
    };
    vp.addEventListener("pointerup", stop); vp.addEventListener("pointercancel", stop);
    vp.addEventListener("pointerleave", () => { showCursor(-10, -10); if (!drawing) clearPreview(); });
    vp.addEventListener("dblclick", (e) => {
      if (tool !== "polygon") return;
      // The two clicks of the double-click added the same corner twice: keep it once.
      if (poly.length >= 2) { const a = poly[poly.length - 1], b = poly[poly.length - 2]; if (Math.hypot(a[0] - b[0], a[1] - b[1]) < 1) poly.pop(); }
      closePolygon(); e.preventDefault();
    });
    vp.addEventListener("auxclick", (e) => e.preventDefault());
    vp.addEventListener("mousedown", (e) => { if (e.button === 1) e.preventDefault(); });  // no autoscroll
    vp.addEventListener("wheel", (e) => {
      if (!mask) return;
      e.preventDefault();
      zoomAt(Math.exp(-e.deltaY * 0.0015), e.clientX, e.clientY);
    }, { passive: false });
    document.querySelectorAll(".tool").forEach((b) => b.addEventListener("click", () => pickTool(b.dataset.tool)));
    $("size").addEventListener("input", () => setSize(Number($("size").value)));
    $("opacity").addEventListener("input", () => setOpacity(Number($("opacity").value)));
    setOpacity(55);
    $("undo").addEventListener("click", undo); $("redo").addEventListener("click", redo);
    $("save").addEventListener("click", save); $("save-next").addEventListener("click", saveNext);
    $("zoom-in").addEventListener("click", () => zoomAt(1.25)); $("zoom-out").addEventListener("click", () => zoomAt(0.8));
    $("fit").addEventListener("click", fit);
    $("revert").addEventListener("click", async () => {
      if (!cur || cur.kind !== "round") { BS.flash("revert: only round images have a prediction", true); return; }
      const s = await load(cur, "prediction"); pushUndo(); mask = decode(s.mask); render(); changed(null); setDirty(true);
      status(`${cur.id}: back to the target's prediction (Z undoes)`);
    });
    $("clear").addEventListener("click", () => { if (!mask) return; pushUndo(); mask.fill(IGNORE); render(); setDirty(true); changed(null); });
    $("upload").addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!cur || !$("upload-file").files.length) { BS.flash("choose a PNG file first", true); return; }
      const fd = new FormData();
      fd.append("kind", cur.kind); fd.append("ref", cur.ref); fd.append("image_id", cur.id);
      fd.append("file", $("upload-file").files[0]);
      await BS.api("POST", "/api/labels/upload", fd);
      BS.flash(`uploaded the mask of ${cur.id}`); cur.done = true; open(cur);
    });
    document.addEventListener("keyup", (e) => { if (e.key === " ") spaceDown = false; });
    document.addEventListener("keydown", (e) => {
      if (BS.typing(e)) return;
      const k = e.key, ctrl = e.ctrlKey || e.metaKey;
      if (k === " ") { spaceDown = true; e.preventDefault(); return; }
      if (ctrl && (k === "z" || k === "Z")) { e.shiftKey ? redo() : undo(); e.preventDefault(); return; }
      if (ctrl && (k === "y" || k === "Y")) { redo(); e.preventDefault(); return; }
      if (ctrl && (k === "s" || k === "S")) { save(); e.preventDefault(); return; }
      if (ctrl || e.altKey) return;
      const tools = { b: "brush", e: "eraser", f: "fill", p: "polygon", g: "superpixel", c: "competitor" };
      const lk = k.toLowerCase();
      if (tools[lk]) { pickTool(tools[lk]); return; }
      if (k === "Enter" && tool === "polygon") { closePolygon(); e.preventDefault(); }
      else if (k === "Escape") { poly = []; drawPoly(); }
      else if (k === "Backspace" && tool === "polygon") { poly.pop(); drawPoly(); e.preventDefault(); }
      else if (lk === "k") { if (comps.length) { compAt = (compAt + 1) % comps.length; clearPreview(); toolHint(); } }
      else if (lk === "z") undo();
      else if (lk === "y") redo();
      else if (lk === "s") save();
      else if (lk === "n") saveNext();
      else if (lk === "r") fit();
      else if (lk === "v") canvas.hidden = !canvas.hidden;
      else if (k === "[") setSize(size - 1);
      else if (k === "]") setSize(size + 1);
      else if (k === ",") setOpacity(Number($("opacity").value) - 10);
      else if (k === ".") setOpacity(Number($("opacity").value) + 10);
      else if (k === "+" || k === "=") zoomAt(1.25);
      else if (k === "-") zoomAt(0.8);
      else if (k >= "0" && k <= "9") { const c = k === "0" ? 9 : Number(k) - 1; if (classes && c < classes.names.length) setClass(c); }
    });
    window.addEventListener("beforeunload", (e) => { if (dirty) { e.preventDefault(); e.returnValue = ""; } });
    const resized = () => { sizeViewport(); if (view.fitted) fit(); };
    window.addEventListener("resize", resized);
    const ro = new ResizeObserver(resized);  // a toolbar or the class row changing height moves the viewport
    document.querySelectorAll(".editor .toolbar, #classes").forEach((el) => ro.observe(el));
    // The key legend stays as the person left it (open for newcomers, closed once learnt).
    const keys = $("keys");
    if (localStorage.getItem("bs-label-keys") === "closed") keys.open = false;
    keys.addEventListener("toggle", () => localStorage.setItem("bs-label-keys", keys.open ? "open" : "closed"));
    sizeViewport();
    const q = await BS.api("GET", "/api/labels/queue");
    classes = q.classes; rgb = classes.palette.map(hexToRgb); queue = q.items;
    $("classes").replaceChildren(...classes.names.map((n, k) => {
      const b = document.createElement("button"); b.className = "cls"; b.dataset.k = k;
      const sw = document.createElement("i"); sw.style.background = classes.palette[k];
      b.append(sw, n);
      if (k < 10) { const kb = document.createElement("kbd"); kb.textContent = String((k + 1) % 10); b.append(" ", kb); }
      b.addEventListener("click", () => setClass(k)); return b;
    }));
    setClass(0); setTool("brush");
    const p = new URLSearchParams(location.search);
    let first = queue.find((x) => x.kind === p.get("kind") && x.ref === p.get("ref") && x.id === p.get("id"));
    if (!first) first = queue.find((x) => !x.done) || queue[0];
    if (!first) {  // nothing to label: say so, without an empty editor around the message
      $("empty").hidden = false; drawQueue(); document.body.dataset.ready = "1";
      document.querySelectorAll(".editor .toolbar, #classes, .infobar, #viewport, #upload").forEach((el) => { el.hidden = true; });
      return;
    }
    await open(first, ["empty", "prediction"].includes(p.get("start")) ? p.get("start") : "auto");
    document.body.dataset.ready = "1";
  });
  // For tests and scripting: the mask (class counts, base64), tools' state, where a pixel is on screen.
  window.bsLabel = {
    counts: () => { const c = {}; if (mask) for (const v of mask) c[v] = (c[v] || 0) + 1; return c; },
    mask: () => { let s = ""; for (let i = 0; i < mask.length; i += 0x8000) s += String.fromCharCode.apply(null, mask.subarray(i, i + 0x8000)); return btoa(s); },
    state: () => ({ tool, cls, size, width: W, height: H, competitor: comps[compAt] ? comps[compAt].name : null,
      competitors: comps.map((c) => c.name), segments: segIdx ? segIdx.length : 0, level, undo: undoStack.length, scale: view.scale }),
    client: (x, y) => { const r = canvas.getBoundingClientRect(); return [r.left + x * r.width / W, r.top + y * r.height / H]; },
    setSize: (s) => setSize(s),
  };
})();
