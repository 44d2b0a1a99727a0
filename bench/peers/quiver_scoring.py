"""The functions module quiver serves in the functions suite: ``score``, the XGBatch scorer.

``quiver serve --functions bench.peers.quiver_scoring`` imports it in every worker process
(with the repository on ``PYTHONPATH``), each of which loads the booster from
``$BENCH_XGBATCH_MODEL`` once and scores each batch as the other peers do
(:func:`bench.xgbatch.score`: ``inplace_predict`` on one thread).
"""

from __future__ import annotations

import pyarrow as pa
import quiver.functions as qf

from bench import xgbatch

booster = xgbatch.load()


@qf.function(input_schema=xgbatch.INPUT_SCHEMA, output_schema=xgbatch.OUTPUT_SCHEMA)
def score(batch: pa.RecordBatch):
    """Probability of the positive class, per row: the XGBatch model on 20 features."""
    return xgbatch.score(booster, batch)
