"""The functions module the function tests serve (``--functions tests/functions_fixture.py``).

Importable without a server: the tests also call these functions in-process to know
what the server must answer. ``score`` is an xgboost-cpu booster trained at import on
seeded synthetic data (milliseconds), predicting with one thread, as a scoring
service's model would be loaded.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xgboost as xgb

import quiver.functions as qf

#: The model's input: 20 float32 features f0..f19.
FEATURES = pa.schema([(f"f{i}", pa.float32()) for i in range(20)])
SCORE_SCHEMA = pa.schema([("score", pa.float32())])
SEED = 24


def features(rows: int, seed: int = SEED) -> pa.RecordBatch:
    """Seeded random features in ``FEATURES``'s schema."""
    values = np.random.default_rng(seed).random((rows, len(FEATURES)), dtype=np.float32)
    return pa.RecordBatch.from_arrays(list(values.T), schema=FEATURES)


def _train() -> xgb.Booster:
    rng = np.random.default_rng(SEED)
    x = rng.random((2_000, len(FEATURES)), dtype=np.float32)
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0.8).astype(np.float32)
    params = {"objective": "binary:logistic", "max_depth": 3, "nthread": 1, "seed": SEED}
    booster = xgb.train(params, xgb.DMatrix(x, label=y), num_boost_round=10)
    booster.set_param({"nthread": 1})  # inplace_predict's threads: the workers are the parallelism
    return booster


MODEL = _train()


def predict(batch: pa.RecordBatch) -> np.ndarray:
    """The model's scores of a batch of ``FEATURES``, as ``score`` computes them."""
    matrix = np.column_stack([batch.column(i).to_numpy() for i in range(batch.num_columns)])
    return np.asarray(MODEL.inplace_predict(matrix), dtype=np.float32)


@qf.function(input_schema=FEATURES, output_schema=SCORE_SCHEMA)
def score(batch: pa.RecordBatch) -> np.ndarray:
    """The probability that a row is positive.

    An xgboost-cpu booster of 10 trees.
    """
    return predict(batch)


@qf.function
def identity(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch as it came."""
    return batch


@qf.function(pandas=True)
def double(frame: Any) -> Any:
    """Column ``x`` doubled, as a pandas DataFrame."""
    frame["x"] = frame["x"] * 2
    return frame


@qf.function(output_schema=pa.schema([("first", pa.int64())]))
def first_col(batch: pa.RecordBatch) -> np.ndarray:
    """The first column, as a numpy array."""
    return np.asarray(batch.column(0).to_numpy(zero_copy_only=False), dtype=np.int64)


@qf.function
def raises(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Always raises ``ValueError("bad row")``."""
    raise ValueError("bad row")


@qf.function
def empty(batch: pa.RecordBatch) -> pa.RecordBatch:
    """No rows: the batch's first 0."""
    return batch.slice(0, 0)


@qf.function(output_schema=pa.schema([("x", pa.int64())]))
def wrong_output(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Declares ``x: int64`` but returns ``x: string``: a FUNCTION_OUTPUT error."""
    return pa.record_batch({"x": pa.array(["a"] * batch.num_rows, pa.string())})


@qf.function
def slow_even(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch, after 0.3 s if its first ``x`` is even, else at once.

    So that with several workers, batches complete out of order.
    """
    if batch.num_rows and batch["x"][0].as_py() % 2 == 0:
        time.sleep(0.3)
    return batch


@qf.function
def crash(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch; the worker exits at once (``os._exit(1)``) if column ``x`` holds -1."""
    if pc.any(pc.equal(batch["x"], -1)).as_py():
        os._exit(1)
    return batch


@qf.function
def hang(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch; sleeps an hour first if column ``x`` holds -2."""
    if pc.any(pc.equal(batch["x"], -2)).as_py():
        time.sleep(3600)
    return batch


@qf.function(output_schema=pa.schema([("pid", pa.int64())]))
def worker_pid(batch: pa.RecordBatch) -> np.ndarray:
    """The worker's process id on every row, after 0.2 s: which worker ran a batch."""
    time.sleep(0.2)
    return np.full(batch.num_rows, os.getpid(), dtype=np.int64)
