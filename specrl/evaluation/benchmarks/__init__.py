"""What the benchmark scripts under ``experiments/`` compute, so that a test can import it and the
scripts stay thin (parse the arguments, call this, write the page). Every benchmark that compares
configurations plays them through the one comparison loop, :func:`specrl.evaluation.compare.compare`
(but the request stream, whose setups take turns per request in
:func:`specrl.serving.serve_stream`).

Shared by all of them:

- :mod:`.records`: timed run records: speed per repeat, medians, paired ratios (their 95% interval:
  :func:`specrl.evaluation.intervals.paired_ratio_interval`),
  acceptance, outputs equal to a reference;
- :mod:`.prompts`: which prompts a benchmark decodes.

One module per benchmark (its players and summary) and one for its page:

- :mod:`.decode`, :mod:`.decode_page`, :mod:`.forward_costs`: ``bench_decode.py``, our engine
  against HF ``generate``;
- :mod:`.batch`, :mod:`.batch_page`: ``bench_batch.py``, speed-up by batch size and k;
- :mod:`.drafters`, :mod:`.drafters_page`: ``bench_drafters.py``, the drafter pool;
- :mod:`.hf_generate`, :mod:`.hf_generate_page`: ``bench_hf_generate.py``, specrl inside HF
  ``generate``;
- :mod:`.batch_real`, :mod:`.batch_real_page`: ``batch_real.py``, batch-aware control under
  continuous batching;
- :mod:`.stream`, :mod:`.stream_page`: ``serve_stream.py``, a shifting request stream served with
  the draft frozen and adapted online.
"""
