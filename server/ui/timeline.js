// The timeline: record counts per step drawn on a <canvas>. Drag across it to zoom into a
// range, scroll (or pinch-scroll) to zoom around the pointer.
import { shortTime, count, duration } from "./util.js";

export class Timeline {
  constructor(canvas, onZoom) {
    this.canvas = canvas;
    this.onZoom = onZoom;
    this.data = null;
    this.drag = null;
    this.wheelTimer = null;
    this.pending = null;
    canvas.addEventListener("pointerdown", (e) => this.down(e));
    canvas.addEventListener("pointermove", (e) => this.move(e));
    canvas.addEventListener("pointerup", (e) => this.up(e));
    canvas.addEventListener("pointercancel", () => { this.drag = null; this.draw(); });
    canvas.addEventListener("wheel", (e) => this.wheel(e), { passive: false });
    this.resize = new ResizeObserver(() => this.draw());
    this.resize.observe(canvas);
  }

  destroy() { this.resize.disconnect(); clearTimeout(this.wheelTimer); }

  /** How many steps suit the canvas's width. */
  bars() { return Math.max(20, Math.min(300, Math.floor(this.canvas.clientWidth / 5))); }

  set(hist) { this.data = hist; this.pending = null; this.draw(); }

  view() { return this.pending || (this.data && { start: this.data.start, stop: this.data.stop }); }

  tsAt(x) {
    const v = this.view();
    const w = this.canvas.clientWidth || 1;
    return v.start + (Math.min(Math.max(x, 0), w) / w) * (v.stop - v.start);
  }

  down(e) {
    if (!this.data) return;
    this.canvas.setPointerCapture(e.pointerId);
    this.drag = { x0: e.offsetX, x1: e.offsetX };
  }

  move(e) {
    if (!this.drag) return;
    this.drag.x1 = e.offsetX;
    this.draw();
  }

  up(e) {
    if (!this.drag) return;
    const { x0 } = this.drag;
    const x1 = e.offsetX;
    this.drag = null;
    if (Math.abs(x1 - x0) < 4) { this.draw(); return; }
    const a = Math.floor(this.tsAt(Math.min(x0, x1)));
    const b = Math.ceil(this.tsAt(Math.max(x0, x1)));
    this.zoomTo(a, Math.max(b, a + 1));
  }

  wheel(e) {
    if (!this.data) return;
    e.preventDefault();
    const v = this.view();
    const factor = e.deltaY > 0 ? 1.4 : 1 / 1.4;
    const at = this.tsAt(e.offsetX);
    const span = Math.max(10, (v.stop - v.start) * factor);
    const start = Math.max(0, Math.round(at - (at - v.start) * factor));
    this.pending = { start, stop: Math.round(start + span) };
    this.draw();
    clearTimeout(this.wheelTimer);
    this.wheelTimer = setTimeout(() => this.zoomTo(this.pending.start, this.pending.stop), 250);
  }

  zoomTo(start, stop) {
    this.pending = { start, stop };
    this.onZoom(start, stop);
  }

  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth;
    const hgt = c.clientHeight;
    if (!w || !hgt) return;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(hgt * dpr)) {
      c.width = Math.round(w * dpr);
      c.height = Math.round(hgt * dpr);
    }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, hgt);
    g.fillStyle = "#fafbfc";
    g.fillRect(0, 0, w, hgt);
    const axis = 18;
    const plot = hgt - axis;
    g.font = "11px system-ui, sans-serif";
    if (!this.data) return;
    const d = this.data;
    const v = this.view();
    const span = Math.max(1, v.stop - v.start);
    const max = Math.max(1, ...d.counts);
    const x = (ts) => ((ts - v.start) / span) * w;
    g.fillStyle = "#1f6feb";
    d.counts.forEach((n, i) => {
      if (!n) return;
      const a = x(d.start + i * d.step);
      const b = x(Math.min(d.stop, d.start + (i + 1) * d.step));
      const bh = Math.max(1, (n / max) * (plot - 14));
      g.fillRect(a, plot - bh, Math.max(1, b - a - (b - a > 3 ? 1 : 0)), bh);
    });
    g.strokeStyle = "#d0d7de";
    g.beginPath(); g.moveTo(0, plot + 0.5); g.lineTo(w, plot + 0.5); g.stroke();
    g.fillStyle = "#656d76";
    g.textBaseline = "top";
    g.fillText(`max ${count(max)} / ${duration(d.step)}`, 4, 2);
    const ticks = Math.max(2, Math.floor(w / 160));
    for (let i = 0; i <= ticks; i++) {
      const ts = v.start + (span * i) / ticks;
      const label = shortTime(Math.round(ts), span);
      const tw = g.measureText(label).width;
      const px = Math.min(Math.max(0, x(ts) - tw / 2), w - tw);
      g.fillText(label, px, plot + 4);
    }
    if (this.drag) {
      const a = Math.min(this.drag.x0, this.drag.x1);
      const b = Math.max(this.drag.x0, this.drag.x1);
      g.fillStyle = "rgba(31, 111, 235, 0.18)";
      g.fillRect(a, 0, b - a, plot);
    }
  }
}
