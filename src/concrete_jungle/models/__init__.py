"""Models for every stage (base model, training, evaluation), in three modules; nothing is re-exported here, so
importing one module loads only what it needs (:mod:`~concrete_jungle.models.encoding` loads neither open_clip nor
the builder).

- :mod:`concrete_jungle.models.build`: building. :func:`~concrete_jungle.models.build.build_model` (one builder for
  the kinds ``world``, ``lit`` and ``open_clip``), :class:`~concrete_jungle.models.build.ModelBundle` (model +
  ``preprocess_train``/``preprocess_val`` + tokenizer), :func:`~concrete_jungle.models.build.default_spec`,
  :func:`~concrete_jungle.models.build.lock_image_tower`, the open_clip config registration
  (:func:`~concrete_jungle.models.build.register_model_configs` for the configs shipped in
  ``concrete_jungle/model_configs/``, :func:`~concrete_jungle.models.build.register_lit_config`,
  :func:`~concrete_jungle.models.build.lit_config_dir`), the LiT tower weights
  (:func:`~concrete_jungle.models.build.efficientnet_lite0_state_dict`) and the names ``CONFIG_DIR``,
  ``WORLD_MODEL_NAME``, ``PAPER_MODEL_NAME``, ``PAPER_PRETRAINED``, ``LIT_IMAGE_MEAN``, ``LIT_IMAGE_STD``.
- :mod:`concrete_jungle.models.checkpoints`: checkpoints.
  :func:`~concrete_jungle.models.checkpoints.save_checkpoint` (open_clip-loadable, byte-identical wherever written,
  ``"complete"`` flag), :func:`~concrete_jungle.models.checkpoints.load_model` (refuses a checkpoint not marked
  complete), :func:`~concrete_jungle.models.checkpoints.read_checkpoint`,
  :func:`~concrete_jungle.models.build.read_weights_only`, ``CHECKPOINT_FORMAT_VERSION`` and
  ``MINILM_PATH_PLACEHOLDER``.
- :mod:`concrete_jungle.models.encoding`: embeddings in cosine space (L2-normalised float32 ``[M, D]``).
  :func:`~concrete_jungle.models.encoding.encode_images`, :func:`~concrete_jungle.models.encoding.encode_texts` and
  the chunked :func:`~concrete_jungle.models.encoding.encode_image_files`.

What to build is a :class:`concrete_jungle.params.ModelSpec` (with ``LIT_MODEL_NAME``), which lives in
:mod:`concrete_jungle.params`.
"""
