// Mask editor: starts from the model's prediction (or the stored / given mask); brush, eraser
// (paints "unlabeled", 255), flood fill, class picker with shortcuts, opacity, undo/redo, zoom;
// saves the class ids (uint8 [H, W]) which the server stores as an index PNG.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const IGNORE = 255;
  let classes = null, rgb = [], queue = [], cur = null;
  let W = 0, H = 0, mask = null, tool = "brush", cls = 0, size = 6, zoom = 1, dirty = false;
  const undoStack = [], redoStack = [];
  let canvas, ctx, imageData;

  function hexToRgb(h) { return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); }
  function render(x0 = 0, y0 = 0, x1 = W, y1 = H) {
    const d = imageData.data;
    for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) {
      const i = y * W + x, v = mask[i], o = i * 4;
      if (v === IGNORE || v >= rgb.length) { d[o + 3] = 0; continue; }
      const c = rgb[v]; d[o] = c[0]; d[o + 1] = c[1]; d[o + 2] = c[2]; d[o + 3] = 255;
    }
    ctx.putImageData(imageData, 0, 0, x0, y0, x1 - x0, y1 - y0);
  }
  function pushUndo() { undoStack.push(mask.slice()); if (undoStack.length > 50) undoStack.shift(); redoStack.length = 0; }
  function status(t) { $("status").textContent = t; }
  function paintDisc(cx, cy, value) {
    const r = size / 2, x0 = Math.max(0, Math.floor(cx - r)), x1 = Math.min(W, Math.ceil(cx + r));
    const y0 = Math.max(0, Math.floor(cy - r)), y1 = Math.min(H, Math.ceil(cy + r));
    for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) {
      const dx = x + 0.5 - cx, dy = y + 0.5 - cy;
      if (dx * dx + dy * dy <= r * r || size <= 1) mask[y * W + x] = value;
    }
    if (x1 > x0 && y1 > y0) render(x0, y0, x1, y1);
  }
  function paintLine(ax, ay, bx, by, value) {
    const n = Math.max(1, Math.ceil(Math.hypot(bx - ax, by - ay) / Math.max(1, size / 4)));
    for (let k = 0; k <= n; k++) paintDisc(ax + (bx - ax) * k / n, ay + (by - ay) * k / n, value);
  }
  function floodFill(x, y, value) {
    const start = mask[y * W + x];
    if (start === value) return;
    const stack = [y * W + x];
    while (stack.length) {
      const i = stack.pop();
      if (mask[i] !== start) continue;
      mask[i] = value;
      const px = i % W;
      if (px > 0) stack.push(i - 1);
      if (px < W - 1) stack.push(i + 1);
      if (i >= W) stack.push(i - W);
      if (i < W * (H - 1)) stack.push(i + W);
    }
    render();
  }
  function toPixel(e) {
    const r = canvas.getBoundingClientRect();
    return [(e.clientX - r.left) * W / r.width, (e.clientY - r.top) * H / r.height];
  }
  function applyZoom() {
    const box = $("canvas-box");
    const base = Math.min(640, Math.max(320, W * 4)) / Math.max(W, H, 1);
    box.style.width = `${W * base * zoom}px`;
    box.style.height = `${H * base * zoom}px`;
  }
  function setTool(t) {
    tool = t;
    document.querySelectorAll(".tool").forEach((b) => b.classList.toggle("active", b.dataset.tool === t));
  }
  function setClass(k) {
    cls = k; setTool(tool === "eraser" ? "brush" : tool);
    document.querySelectorAll(".cls").forEach((b) => b.classList.toggle("active", Number(b.dataset.k) === k));
  }
  function drawQueue() {
    const ol = $("queue"); ol.replaceChildren();
    const done = queue.filter((x) => x.done).length;
    $("progress").textContent = `${done} / ${queue.length}`;
    queue.forEach((it) => {
      const li = document.createElement("li"), a = document.createElement("a");
      a.href = `/label?${BS.q({ kind: it.kind, ref: it.ref, id: it.id })}`;
      a.textContent = (it.kind === "fix" ? `fix ${it.ref}: ` : "") + it.id;
      a.addEventListener("click", (e) => { e.preventDefault(); open(it); history.replaceState(null, "", a.href); });
      li.append(a); if (it.done) li.classList.add("done");
      if (cur && it.kind === cur.kind && it.ref === cur.ref && it.id === cur.id) li.classList.add("current");
      ol.append(li);
    });
  }
  async function open(it) {
    cur = it;
    const s = await BS.api("GET", `/api/labels/start?${BS.q({ kind: it.kind, ref: it.ref, id: it.id })}`);
    W = s.width; H = s.height;
    const raw = atob(s.mask); mask = new Uint8Array(W * H);
    for (let i = 0; i < raw.length; i++) mask[i] = raw.charCodeAt(i);
    canvas.width = W; canvas.height = H;
    imageData = ctx.createImageData(W, H);
    $("base").src = it.kind === "round" ? `/api/images/pool?${BS.q({ id: it.id })}`
      : `/api/images/review?${BS.q({ set: it.ref, id: it.id, layer: "image" })}`;
    undoStack.length = 0; redoStack.length = 0; dirty = false;
    render(); applyZoom(); drawQueue();
    status(`${it.id}: starting from the ${s.source} mask`);
    document.body.dataset.loaded = it.id;
  }
  async function save() {
    if (!cur) return;
    let bin = "";
    for (let i = 0; i < mask.length; i += 0x8000) bin += String.fromCharCode.apply(null, mask.subarray(i, i + 0x8000));
    const r = await BS.api("POST", "/api/labels", { kind: cur.kind, ref: cur.ref, image_id: cur.id, width: W, height: H, mask: btoa(bin) });
    cur.done = true; dirty = false; drawQueue();
    status(`saved ${cur.id}`); BS.flash(`saved ${cur.id}`);
    document.body.dataset.saved = cur.id;
    return r;
  }
  function undo() { if (!undoStack.length) return; redoStack.push(mask.slice()); mask = undoStack.pop(); render(); }
  function redo() { if (!redoStack.length) return; undoStack.push(mask.slice()); mask = redoStack.pop(); render(); }

  document.addEventListener("DOMContentLoaded", async () => {
    canvas = $("mask"); ctx = canvas.getContext("2d");
    let drawing = false, last = null;
    canvas.addEventListener("pointerdown", (e) => {
      if (!mask) return;
      const [x, y] = toPixel(e);
      pushUndo(); dirty = true;
      if (tool === "fill") { floodFill(Math.min(W - 1, Math.floor(x)), Math.min(H - 1, Math.floor(y)), cls); return; }
      drawing = true; last = [x, y]; canvas.setPointerCapture(e.pointerId);
      paintDisc(x, y, tool === "eraser" ? IGNORE : cls);
    });
    canvas.addEventListener("pointermove", (e) => {
      if (!drawing) return;
      const [x, y] = toPixel(e);
      paintLine(last[0], last[1], x, y, tool === "eraser" ? IGNORE : cls); last = [x, y];
    });
    const stop = () => { drawing = false; };
    canvas.addEventListener("pointerup", stop); canvas.addEventListener("pointercancel", stop);
    document.querySelectorAll(".tool").forEach((b) => b.addEventListener("click", () => setTool(b.dataset.tool)));
    $("size").addEventListener("input", () => { size = Number($("size").value); $("size-value").textContent = size; });
    $("opacity").addEventListener("input", () => { canvas.style.opacity = Number($("opacity").value) / 100; });
    canvas.style.opacity = 0.55;
    $("undo").addEventListener("click", undo); $("redo").addEventListener("click", redo);
    $("save").addEventListener("click", save);
    $("zoom-in").addEventListener("click", () => { zoom = Math.min(8, zoom * 1.25); applyZoom(); });
    $("zoom-out").addEventListener("click", () => { zoom = Math.max(0.25, zoom / 1.25); applyZoom(); });
    $("upload").addEventListener("submit", async (e) => {
      e.preventDefault();
      if (!cur || !$("upload-file").files.length) { BS.flash("choose a PNG file first", true); return; }
      const fd = new FormData();
      fd.append("kind", cur.kind); fd.append("ref", cur.ref); fd.append("image_id", cur.id);
      fd.append("file", $("upload-file").files[0]);
      await BS.api("POST", "/api/labels/upload", fd);
      BS.flash(`uploaded the mask of ${cur.id}`); cur.done = true; open(cur);
    });
    document.addEventListener("keydown", (e) => {
      if (BS.typing(e)) return;
      const k = e.key;
      if ((e.ctrlKey || e.metaKey) && (k === "z" || k === "Z")) { e.shiftKey ? redo() : undo(); e.preventDefault(); return; }
      if ((e.ctrlKey || e.metaKey) && (k === "y" || k === "Y")) { redo(); e.preventDefault(); return; }
      if ((e.ctrlKey || e.metaKey) && (k === "s" || k === "S")) { save(); e.preventDefault(); return; }
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      if (k === "b" || k === "B") setTool("brush");
      else if (k === "e" || k === "E") setTool("eraser");
      else if (k === "f" || k === "F") setTool("fill");
      else if (k === "s" || k === "S") save();
      else if (k === "[") { size = Math.max(1, size - 1); $("size").value = size; $("size-value").textContent = size; }
      else if (k === "]") { size = Math.min(64, size + 1); $("size").value = size; $("size-value").textContent = size; }
      else if (k >= "0" && k <= "9") { const c = k === "0" ? 9 : Number(k) - 1; if (classes && c < classes.names.length) setClass(c); }
    });
    window.addEventListener("beforeunload", (e) => { if (dirty) { e.preventDefault(); e.returnValue = ""; } });
    const q = await BS.api("GET", "/api/labels/queue");
    classes = q.classes; rgb = classes.palette.map(hexToRgb); queue = q.items;
    $("classes").replaceChildren(...classes.names.map((n, k) => {
      const b = document.createElement("button"); b.className = "cls"; b.dataset.k = k;
      const sw = document.createElement("i"); sw.style.background = classes.palette[k];
      const key = k < 10 ? ` (${(k + 1) % 10})` : "";
      b.append(sw, `${n}${key}`); b.addEventListener("click", () => setClass(k)); return b;
    }));
    setClass(0);
    const params = new URLSearchParams(location.search);
    let first = queue.find((x) => x.kind === params.get("kind") && x.ref === params.get("ref") && x.id === params.get("id"));
    if (!first) first = queue.find((x) => !x.done) || queue[0];
    if (!first) { $("empty").hidden = false; drawQueue(); document.body.dataset.ready = "1"; return; }
    await open(first);
    document.body.dataset.ready = "1";
  });
  // For tests and scripting: the current mask's class counts.
  window.bsLabel = { counts: () => { const c = {}; if (mask) for (const v of mask) c[v] = (c[v] || 0) + 1; return c; } };
})();
