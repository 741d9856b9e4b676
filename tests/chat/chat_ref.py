#!/usr/bin/env python3
"""chat_ref.py TEMPLATE JSONL VARS.json OUT.json [SPECIALS.json] -- the
reference split of chat records for tests/test_chat.c, computed the way
transformers' apply_chat_template renders (jinja_ref.py's environment):

  prompt = render(messages[:-1], add_generation_prompt=True, **VARS)
  full   = render(messages,      add_generation_prompt=False, **VARS)
  (with tools=None and documents=None, as apply_chat_template without tools)
  target = full[len(prompt):]    (full must start with prompt)

OUT.json: per record {"prompt": str, "target": str}; with SPECIALS.json
({"token": id, ...}) also "input_ids"/"target_ids": the texts encoded by a
byte tokenizer (byte b is id b) that first cuts out the special tokens,
leftmost and longest first, as Hugging Face matches added tokens.
Exits 77 when jinja2 cannot be imported."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import jinja2  # noqa: F401
except ImportError:
    print("jinja2 is not installed for " + sys.executable, file=sys.stderr)
    sys.exit(77)
from jinja_ref import make_env  # noqa: E402


def byte_ids(text, specials):
    ids, i, data = [], 0, text.encode("utf-8")
    toks = sorted(((k.encode("utf-8"), v) for k, v in specials.items()), key=lambda kv: -len(kv[0]))
    while i < len(data):
        for k, v in toks:
            if data.startswith(k, i):
                ids.append(v)
                i += len(k)
                break
        else:
            ids.append(data[i])
            i += 1
    return ids


def main():
    tmpl_path, jsonl, vars_path, out_path = sys.argv[1:5]
    specials = json.load(open(sys.argv[5])) if len(sys.argv) > 5 else None
    env = make_env()
    tmpl = env.from_string(open(tmpl_path, encoding="utf-8").read())
    extra = json.load(open(vars_path))
    out = []
    for line in open(jsonl, encoding="utf-8"):
        if not line.strip():
            continue
        msgs = json.loads(line)["messages"]
        prompt = tmpl.render(messages=msgs[:-1], tools=None, documents=None, add_generation_prompt=True, **extra)
        full = tmpl.render(messages=msgs, tools=None, documents=None, add_generation_prompt=False, **extra)
        assert full.startswith(prompt), "the full rendering does not start with the prompt"
        rec = {"prompt": prompt, "target": full[len(prompt):]}
        if specials is not None:
            rec["input_ids"] = byte_ids(rec["prompt"], specials)
            rec["target_ids"] = byte_ids(rec["target"], specials)
        out.append(rec)
    json.dump(out, open(out_path, "w", encoding="utf-8"), ensure_ascii=False)


main()
