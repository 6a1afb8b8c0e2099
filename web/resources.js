// What the page fetches from its own folder (build/web/, tools/build_web.sh):
// the teachers' config.json and model.safetensors, the manifest of natively
// fitted parameter files, and the files themselves, each when first needed.
// Everything is cached as promises. The page's main thread only asks for
// info() (config and manifest: a few KiB, no WebAssembly: `eg` may be null);
// the compute workers (worker.js) load teachers and predictors.

export class Resources {
  constructor(eg, base = ".") {
    this.eg = eg;
    this.base = base;
    this.teachers = new Map(); // kind -> Promise<{ teacher, config, manifest }>
    this.predictors = new Map(); // "kind/file" -> Promise<Predictor>
    this.sources = new Map(); // "kind/file" -> Promise<string>: parameter files fetched
    this.infos = new Map(); // kind -> Promise<{ config, configText, manifest }>
  }

  // A teacher's config.json (parsed, and its text) and parameter manifest,
  // without its weights.
  info(kind) {
    if (!this.infos.has(kind)) {
      const loading = Promise.all([
        this.fetchOk(`teachers/${kind}/config.json`, "text"),
        this.fetchOk(`params/${kind}/index.json`, "json"),
      ]).then(([configText, manifest]) => ({ config: JSON.parse(configText), configText, manifest }));
      loading.catch(() => this.infos.delete(kind)); // a later call tries again
      this.infos.set(kind, loading);
    }
    return this.infos.get(kind);
  }

  async fetchOk(path, as) {
    const url = `${this.base}/${path}`;
    const response = await fetch(url);
    if (!response.ok) throw new Error(`could not load ${url}: HTTP ${response.status}`);
    return as === "bytes" ? new Uint8Array(await response.arrayBuffer()) : as === "json" ? response.json() : response.text();
  }

  text(path) {
    return this.fetchOk(path, "text");
  }

  teacher(kind) {
    if (!this.teachers.has(kind)) {
      const loading = (async () => {
        const [info, weights] = await Promise.all([this.info(kind), this.fetchOk(`teachers/${kind}/model.safetensors`, "bytes")]);
        const teacher = this.eg.Teacher.fromFiles(info.configText, weights);
        return { teacher, config: teacher.config, manifest: info.manifest };
      })();
      loading.catch(() => this.teachers.delete(kind)); // a later call tries again
      this.teachers.set(kind, loading);
    }
    return this.teachers.get(kind);
  }

  // A grid value of the teacher's manifest, by its file name. A value that
  // shares another's fit names that file as `source` and has its own
  // `settings` (tools/build_web.sh); the file is fetched once.
  predictor(kind, file) {
    const key = `${kind}/${file}`;
    if (!this.predictors.has(key)) {
      const loading = this.info(kind).then(async ({ manifest }) => {
        const value = manifest.methods.flatMap((m) => m.values).find((v) => v.file === file);
        const source = value?.source ?? file;
        const sourceKey = `${kind}/${source}`;
        if (!this.sources.has(sourceKey)) {
          const fetched = this.fetchOk(`params/${kind}/${source}`, "text");
          fetched.catch(() => this.sources.delete(sourceKey));
          this.sources.set(sourceKey, fetched);
        }
        let text = await this.sources.get(sourceKey);
        if (value?.settings) {
          const json = JSON.parse(text);  // numbers read back to the same doubles
          json.settings = value.settings;
          text = JSON.stringify(json);
        }
        return this.eg.Predictor.load(text);
      });
      loading.catch(() => this.predictors.delete(key));
      this.predictors.set(key, loading);
    }
    return this.predictors.get(key);
  }
}
