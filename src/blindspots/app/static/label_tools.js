// Mask operations of the label editor, on a class-id mask (Uint8Array [H * W], row-major, 255 =
// unlabeled). Pure functions: each changes `mask` in place and returns the changed box
// [x0, y0, x1, y1) (or null when nothing changed) so the page redraws only that part.
"use strict";
const LabelTools = (() => {
  function box() { return [Infinity, Infinity, -Infinity, -Infinity]; }
  function grow(b, x, y) { if (x < b[0]) b[0] = x; if (y < b[1]) b[1] = y; if (x + 1 > b[2]) b[2] = x + 1; if (y + 1 > b[3]) b[3] = y + 1; }
  function done(b) { return b[2] > b[0] ? b : null; }
  function union(a, b) { if (!a) return b; if (!b) return a; return [Math.min(a[0], b[0]), Math.min(a[1], b[1]), Math.max(a[2], b[2]), Math.max(a[3], b[3])]; }

  // A disc of diameter `size` px centred at (cx, cy) (pixel centres inside it are painted).
  function disc(mask, W, H, cx, cy, size, value) {
    const r = size / 2, b = box();
    const x0 = Math.max(0, Math.floor(cx - r)), x1 = Math.min(W, Math.ceil(cx + r));
    const y0 = Math.max(0, Math.floor(cy - r)), y1 = Math.min(H, Math.ceil(cy + r));
    for (let y = y0; y < y1; y++) for (let x = x0; x < x1; x++) {
      const dx = x + 0.5 - cx, dy = y + 0.5 - cy;
      if (dx * dx + dy * dy <= r * r || size <= 1) { mask[y * W + x] = value; grow(b, x, y); }
    }
    if (size <= 1 && b[2] < b[0]) {  // a 1-px brush always paints the pixel under the cursor
      const x = Math.floor(cx), y = Math.floor(cy);
      if (x >= 0 && y >= 0 && x < W && y < H) { mask[y * W + x] = value; grow(b, x, y); }
    }
    return done(b);
  }
  function line(mask, W, H, ax, ay, bx, by, size, value) {
    const n = Math.max(1, Math.ceil(Math.hypot(bx - ax, by - ay) / Math.max(0.5, size / 4)));
    let b = null;
    for (let k = 0; k <= n; k++) b = union(b, disc(mask, W, H, ax + (bx - ax) * k / n, ay + (by - ay) * k / n, size, value));
    return b;
  }
  // Pixels whose centres lie inside the polygon [[x, y], ...] (even-odd rule).
  function polygon(mask, W, H, pts, value) {
    if (pts.length < 3) return null;
    const b = box();
    const ys = pts.map((p) => p[1]);
    const y0 = Math.max(0, Math.floor(Math.min(...ys))), y1 = Math.min(H, Math.ceil(Math.max(...ys)));
    for (let y = y0; y < y1; y++) {
      const cy = y + 0.5, xs = [];
      for (let i = 0, j = pts.length - 1; i < pts.length; j = i++) {
        const [xi, yi] = pts[i], [xj, yj] = pts[j];
        if ((yi > cy) !== (yj > cy)) xs.push(xi + (cy - yi) * (xj - xi) / (yj - yi));
      }
      xs.sort((a, c) => a - c);
      for (let k = 0; k + 1 < xs.length; k += 2) {
        const xa = Math.max(0, Math.ceil(xs[k] - 0.5)), xb = Math.min(W - 1, Math.floor(xs[k + 1] - 0.5));
        for (let x = xa; x <= xb; x++) { mask[y * W + x] = value; grow(b, x, y); }
      }
    }
    return done(b);
  }
  // Indices of the 4-connected region of equal value in `labels` containing pixel (x, y).
  function component(labels, W, H, x, y) {
    const start = y * W + x, v = labels[start], seen = new Uint8Array(W * H), out = [];
    const stack = [start]; seen[start] = 1;
    while (stack.length) {
      const i = stack.pop(); out.push(i);
      const px = i % W;
      const nb = [px > 0 ? i - 1 : -1, px < W - 1 ? i + 1 : -1, i >= W ? i - W : -1, i < W * (H - 1) ? i + W : -1];
      for (const j of nb) if (j >= 0 && !seen[j] && labels[j] === v) { seen[j] = 1; stack.push(j); }
    }
    return out;
  }
  function setIndices(mask, W, idx, value) {
    const b = box();
    for (const i of idx) { mask[i] = value === null ? mask[i] : value; grow(b, i % W, Math.floor(i / W)); }
    return done(b);
  }
  // Flood fill of the region of the mask's value under (x, y) with `value`.
  function flood(mask, W, H, x, y, value) {
    if (mask[y * W + x] === value) return null;
    return setIndices(mask, W, component(mask, W, H, x, y), value);
  }
  // Adopt the other model's region under (x, y): its class, on its 4-connected component.
  function adopt(mask, other, W, H, x, y) {
    const idx = component(other, W, H, x, y), b = box();
    for (const i of idx) { mask[i] = other[i]; grow(b, i % W, Math.floor(i / W)); }
    return done(b);
  }
  // Pixel indices of every segment: segs Uint16Array [H * W] of ids 0..n-1 -> Array(n) of Int32Array.
  function segmentIndex(segs, n) {
    const counts = new Int32Array(n);
    for (const s of segs) counts[s]++;
    const out = Array.from(counts, (c) => new Int32Array(c)), fill = new Int32Array(n);
    for (let i = 0; i < segs.length; i++) { const s = segs[i]; out[s][fill[s]++] = i; }
    return out;
  }
  return { disc, line, polygon, component, flood, adopt, setIndices, segmentIndex, union };
})();
