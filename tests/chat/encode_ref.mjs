// encode_ref.mjs TOKENIZER_DIR TEXTS.json OUT.json — the reference encoder
// of tests/test_chat.c: each string of TEXTS.json encoded by
// @huggingface/tokenizers (a JavaScript implementation of tokenizer.json,
// found through the current folder's node_modules) from TOKENIZER_DIR's
// tokenizer.json and tokenizer_config.json, without the tokenizer's
// additions, as apply_chat_template(tokenize=True) encodes a rendered chat.
// Special tokens written in a text become their ids. OUT.json: [[ids], ...].
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.join(process.cwd(), "x.js"));
const hfMod = await import(require.resolve("@huggingface/tokenizers"));
const Tokenizer = hfMod.Tokenizer ?? hfMod.default?.Tokenizer ?? hfMod.default;
const [dir, textsPath, outPath] = process.argv.slice(2);
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const tc = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tj, tc);
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
const out = texts.map((s) => Array.from(tok.encode(s, { add_special_tokens: false }).ids));
fs.writeFileSync(outPath, JSON.stringify(out));
