#!/usr/bin/env python3
"""jinja_ref.py CASES.json OUT.json -- the independent reference of
tests/test_jinja.c and tests/test_chat.c: renders each case with Python
jinja2 in the environment Hugging Face transformers builds for chat
templates (a sandbox that refuses to mutate values, trim_blocks and
lstrip_blocks on, the loop-controls extension, a tojson filter that is
json.dumps(ensure_ascii=False) and a raise_exception global).

CASES.json: [{"template": str, "vars": {...}}, ...]
OUT.json:   [{"ok": true, "out": str} | {"ok": false, "error": str}, ...]
Exits 77 (skipped) when jinja2 cannot be imported."""
import json
import sys

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is not installed for " + sys.executable, file=sys.stderr)
    sys.exit(77)


class Generation(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body, as
    transformers' AssistantTracker does (which also records where)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = make_env()
    out = []
    for c in cases:
        try:
            text = env.from_string(c["template"]).render(**c.get("vars", {}))
            out.append({"ok": True, "out": text})
        except Exception as e:  # every failure is a failure the C side must share
            out.append({"ok": False, "error": type(e).__name__ + ": " + str(e)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
