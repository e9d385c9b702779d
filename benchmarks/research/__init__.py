"""Paper research: the seeds' Flickr8k reproductions (``flickr8k_table.py``,
``w2vv_flickr8k.py``, ``video_flickr8k.py``, ``tags_flickr8k.py``), their claims re-tested
(``claims.py`` runs and reports them), and the papers' own figures (``papers.py``). The
product's benchmarks are one folder up.

The modules import ``_common`` from ``benchmarks/``, which must be on ``sys.path`` (each
script here puts it there)."""
