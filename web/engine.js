// The main thread's side of a compute worker (worker.js): starts it, and turns
// its messages into promises. Each request gets an id; its first reply settles
// it. Messages that answer no pending request (an update's "detail", which
// follows its "result"; an error in that second part; "stale") go to
// onMessage.

export class Engine {
  // options: { isa, threads, onMessage(msg) }
  constructor(options = {}) {
    this.worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
    this.pending = new Map(); // id -> { resolve, reject }
    this.nextId = 1;
    this.onMessage = options.onMessage ?? (() => {});
    this.ready = new Promise((resolve, reject) => this.pending.set(0, { resolve, reject }));
    this.worker.onmessage = (e) => this.receive(e.data);
    // A worker that fails to load (a missing file, a syntax error) reports here.
    this.worker.onerror = (e) => {
      e.preventDefault?.();
      this.failAll(new Error(`the compute worker failed: ${e.message || "it could not be loaded"}`));
    };
    this.worker.postMessage({ type: "init", isa: options.isa ?? null, threads: options.threads ?? 1 });
  }

  receive(msg) {
    const id = msg.type === "ready" ? 0 : msg.id;
    const waiting = msg.type === "stale" || msg.type === "detail" ? null : this.pending.get(id);
    if (!waiting) return this.onMessage(msg);
    this.pending.delete(id);
    if (msg.type === "error") waiting.reject(new Error(msg.message));
    else waiting.resolve(msg);
  }

  failAll(err) {
    for (const waiting of this.pending.values()) waiting.reject(err);
    this.pending.clear();
  }

  // Sends { type, ...fields } and expects no reply.
  tell(type, fields = {}) {
    this.worker.postMessage({ type, ...fields });
  }

  // Sends { type, ...fields } and resolves with the worker's reply; the
  // request's id is this.lastId until the next request.
  request(type, fields) {
    const id = this.nextId++;
    this.lastId = id;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ type, id, ...fields });
    });
  }
}
