"""spm_ref.py MODEL LINES OUT ADD_BOS ADD_EOS — the reference side of
tests/test_tokenizer_spm.c: Debian's python3-sentencepiece encodes each
line of LINES (UTF-8 text, one per line) with MODEL and writes to OUT, per
line, the ids, a tab, and the hex of decode(ids) (special pieces left out,
as the library decodes). Exits 77 when the module is missing."""
import sys

try:
    import sentencepiece as spm
except ImportError:
    print("test_tokenizer_spm: skipped: python3-sentencepiece is not installed", file=sys.stderr)
    sys.exit(77)

model, lines, out, add_bos, add_eos = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1", sys.argv[5] == "1"
sp = spm.SentencePieceProcessor(model_file=model)
with open(lines, encoding="utf-8", newline="\n") as f, open(out, "w") as o:
    for line in f.read().split("\n")[:-1]:
        ids = sp.encode(line, add_bos=add_bos, add_eos=add_eos)
        text = sp.decode(ids).encode("utf-8")
        o.write(" ".join(map(str, ids)) + "\t" + text.hex() + "\n")
