// bench_tokenizer_ref.mjs NODE_DIR TOKENIZER_DIR FILE... — the JavaScript
// side of bench/bench_tokenizer.c: the same lines encoded by
// @huggingface/tokenizers (the reference of tests/test_tokenizer_ref.c)
// with TOKENIZER_DIR's tokenizer.json, and, when the file is GPT-2's, by
// gpt-tokenizer's r50k encoder; a fresh tokenizer per repeat, median of 5.
// NODE_DIR holds node_modules (the test's build folder: BUILD/tokref).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [nodeDir, tokDir, ...files] = process.argv.slice(2);
if (!files.length) throw new Error("usage: bench_tokenizer_ref.mjs NODE_DIR TOKENIZER_DIR FILE...");
const require = createRequire(path.join(path.resolve(nodeDir), "x.js"));
const hfMod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = hfMod.Tokenizer ?? hfMod.default?.Tokenizer ?? hfMod.default;
const json = JSON.parse(fs.readFileSync(path.join(tokDir, "tokenizer.json"), "utf8"));
const cfgPath = path.join(tokDir, "tokenizer_config.json");
const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, "utf8")) : {};
let text = "";
for (const f of files) {
  const t = fs.readFileSync(f, "utf8");
  text += t.endsWith("\n") ? t : t + "\n";
}
const lines = text.split("\n").slice(0, -1);
const bytes = Buffer.byteLength(text);

function bench(name, make, encode) {
  const times = [];
  let tokens = 0;
  for (let r = 0; r < 5; r++) {
    const tok = make();
    const t0 = performance.now();
    tokens = 0;
    for (const l of lines) tokens += encode(tok, l).length;
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const ms = times[2];
  console.log(`${name}: ${bytes} bytes -> ${tokens} tokens in ${ms.toFixed(1)} ms (median of 5): ` +
              `${(bytes / 1e6 / (ms / 1e3)).toFixed(2)} MB/s, ${(tokens / (ms / 1e3)).toFixed(0)} tokens/s`);
}

bench("@huggingface/tokenizers", () => new Tokenizer(json, cfg), (t, l) => t.encode(l, { add_special_tokens: false }).ids);
if (json.model.vocab["Ġthe"] === 262) { // GPT-2's vocabulary
  const r50k = require("gpt-tokenizer/encoding/r50k_base");
  bench("gpt-tokenizer r50k", () => { r50k.clearMergeCache?.(); return r50k; }, (t, l) => t.encode(l));
}
