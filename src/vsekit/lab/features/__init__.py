"""Image features: backbones, crops, extraction to a FeatureStore, FNE, R-MAC.

Import each name from the module that defines it; this package re-exports nothing, so
importing one of its NumPy-only modules (``store``, ``audio_store``) never loads PyTorch:

* ``backbones``: ``Backbone``, ``LayerSpec``, ``create_backbone``, ``list_backbones``,
  ``register_backbone`` (PyTorch)
* ``extract``: ``ExtractItem``, ``embed_images``, ``extract_to_store`` (PyTorch)
* ``featurizer``: ``ImageFeaturizer`` (PyTorch)
* ``rmac``: ``rmac`` (PyTorch)
* ``store``: ``FeatureStore``, ``StoreError``
* ``weights``: ``install_weights``; ``weight_files``: ``WeightsError`` (PyTorch)

The Full-Network Embedding itself (``FNEStats``, ``full_network_embedding``,
``ternarise``) is in the core, :mod:`vsekit.fne`."""
