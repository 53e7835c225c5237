"""What the benchmark scripts of ``experiments/`` share: their measurements and pages, one module per
benchmark and one for its page, so that each script stays short (parse the arguments, call these,
write the page). Imported as ``benchmarks`` by the scripts (``python experiments/bench_x.py`` puts
``experiments/`` on the path); the package never imports it, and the tests run the scripts.

Every benchmark that compares configurations plays them through the one comparison loop,
:func:`specrl.evaluation.compare.compare` (but the request stream, whose setups take turns per
request in :func:`specrl.serving.serve_stream`), and pairs its speeds with
:mod:`specrl.evaluation.records` (medians, paired ratios and their 95% interval, outputs equal).

- :mod:`.prompts`: which prompts a benchmark decodes;
- :mod:`.decode`, :mod:`.decode_summary`, :mod:`.decode_page`, :mod:`.forward_costs`:
  ``bench_decode.py``, our engine against HF ``generate``;
- :mod:`.batch`, :mod:`.batch_page`: ``bench_batch.py``, speed-up by batch size and k;
- :mod:`.drafters`, :mod:`.drafters_page`: ``bench_drafters.py``, the drafter pool;
- :mod:`.hf_generate`, :mod:`.hf_generate_page`: ``bench_hf_generate.py``, specrl inside HF
  ``generate``;
- :mod:`.batch_real`, :mod:`.batch_real_page`: ``batch_real.py``, batch-aware control under
  continuous batching;
- :mod:`.vllm_engines`, :mod:`.vllm_summary`, :mod:`.vllm_page`: ``bench_vllm.py``, specrl's
  proposer inside vLLM;
- :mod:`.stream`, :mod:`.stream_tables`, :mod:`.stream_page`: ``serve_stream.py``, a shifting
  request stream served with the draft frozen and adapted online;
- :mod:`.result_folder`: the ``README.md`` every script writes into its result folder.
"""
