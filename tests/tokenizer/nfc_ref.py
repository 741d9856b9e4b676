"""nfc_ref.py IN OUT — the reference side of tests/test_tokenizer_nfc.c:
Python's unicodedata.normalize("NFC", line) for each line of IN (UTF-8,
"\n"-separated), written to OUT as one line of hex per input line. Prints
the Unicode version it used on stderr."""
import sys
import unicodedata

src, dst = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8", newline="\n") as f, open(dst, "w") as o:
    for line in f.read().split("\n")[:-1]:
        o.write(unicodedata.normalize("NFC", line).encode("utf-8").hex() + "\n")
print("nfc_ref: Unicode", unicodedata.unidata_version, file=sys.stderr)
