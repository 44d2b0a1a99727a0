"""The functions suite's data and model (the BID'22 paper's XGBatch scenario).

Shared by every peer of the suite, so that all of them score the same rows with the same
model the same way: the in-process scorer, the pyarrow Flight server
(``bench/peers/xgbatch_server.py``), the FastAPI JSON service (``bench/peers/json_scoring.py``)
and the functions module quiver serves (``bench/peers/quiver_scoring.py``).

The harness trains the booster once (:func:`train`) and saves it to a file; each peer loads
it (:func:`load`) from the path in ``$BENCH_XGBATCH_MODEL`` or its command line, and scores
with :func:`score`: ``inplace_predict`` on one thread.

xgboost is imported where it is used, not here: the client processes import this module
for the data alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

#: The features: 20 float32 columns, ``f0`` to ``f19``.
FEATURES = tuple(f"f{i}" for i in range(20))
INPUT_SCHEMA = pa.schema([pa.field(name, pa.float32()) for name in FEATURES])
#: What a scorer answers: one float32 column, the probability of the positive class.
OUTPUT_SCHEMA = pa.schema([pa.field("score", pa.float32())])
#: Bytes of input per row (20 float32).
ROW_BYTES = 4 * len(FEATURES)
#: The model: a booster of this many trees of this depth, trained on this many rows.
TRAIN_ROWS = 100_000
TREES = 100
DEPTH = 6
#: Rows per request of the bulk measurements (and per batch of the in-process scorer).
BATCH_ROWS = 65_536
#: The environment variable that gives a peer the model's path.
MODEL_ENV = "BENCH_XGBATCH_MODEL"
#: The seeds of the training rows and of the rows scored.
TRAIN_SEED = 7
DATA_SEED = 42


def features(rows: int, seed: int = DATA_SEED, batch_rows: int = BATCH_ROWS) -> pa.Table:
    """Return ``rows`` rows of the 20 features, in record batches of ``batch_rows``.

    The same ``seed`` gives the same values in every process, and the first rows of a
    larger table are those of a smaller one (each column has a generator of its own).

    Parameters
    ----------
    rows : int
        Rows of the table.
    seed : int
        The generator's seed.
    batch_rows : int
        Rows per record batch (the last one may be shorter).

    Returns
    -------
    pyarrow.Table
        ``rows * ROW_BYTES`` bytes of float32, uniform in [0, 1).
    """
    columns = [
        pa.array(np.random.default_rng([seed, i]).random(rows, dtype=np.float32))
        for i in range(len(FEATURES))
    ]
    table = pa.Table.from_arrays(columns, schema=INPUT_SCHEMA)
    return pa.Table.from_batches(table.to_batches(max_chunksize=max(1, batch_rows)), INPUT_SCHEMA)


def matrix(batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Return the features of ``batch`` as a C-ordered ``rows x 20`` float32 array (a copy)."""
    columns = [np.asarray(batch.column(name)) for name in FEATURES]
    return np.stack(columns, axis=1) if columns[0].size else np.empty((0, len(FEATURES)), "f4")


def labels(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Return 0/1 labels of the rows of ``x``: a noisy nonlinear rule over most features.

    Interactions and thresholds, so that the trees use their full depth.
    """
    signal = (
        3.0 * x[:, 0] * x[:, 1]
        + np.sin(6.0 * x[:, 2])
        - 2.0 * (x[:, 3] - 0.5) ** 2
        + np.where(x[:, 4] > 0.7, 1.0, -0.5) * x[:, 5]
        + 0.5 * x[:, 6:12].sum(axis=1)
        - 0.3 * x[:, 12:20].sum(axis=1)
    )
    noise = rng.normal(0.0, 0.4, size=len(x))
    return (signal + noise > np.median(signal)).astype(np.float32)


def train(
    path: str | Path,
    rows: int = TRAIN_ROWS,
    trees: int = TREES,
    depth: int = DEPTH,
    seed: int = TRAIN_SEED,
) -> None:
    """Train the booster on ``rows`` seeded rows and save it to ``path`` (``.ubj``).

    Parameters
    ----------
    path : str or pathlib.Path
        Where to save the model.
    rows : int
        Training rows (100k for the suite).
    trees : int
        Boosting rounds.
    depth : int
        Maximum depth of each tree.
    seed : int
        Seed of the training rows (other rows than those scored).
    """
    import xgboost as xgb

    rng = np.random.default_rng(seed)
    x = matrix(features(rows, seed, rows))
    train_set = xgb.DMatrix(x, label=labels(x, rng), feature_names=list(FEATURES))
    params = {
        "objective": "binary:logistic",
        "max_depth": depth,
        "eta": 0.1,
        "tree_method": "hist",
        "seed": seed,
        # One thread: the same model every time, and no OpenMP threads spinning against
        # whatever else the machine runs (a 1-second training took 13 s beside a build).
        "nthread": 1,
    }
    booster = xgb.train(params, train_set, num_boost_round=trees)
    booster.save_model(str(path))


def load(path: str | Path | None = None) -> Any:
    """Load the booster from ``path`` (default: ``$BENCH_XGBATCH_MODEL``), for one thread.

    Raises
    ------
    RuntimeError
        Neither a path nor ``$BENCH_XGBATCH_MODEL`` was given.
    """
    import xgboost as xgb

    if path is None:
        path = os.environ.get(MODEL_ENV)
        if not path:
            raise RuntimeError(f"no model: set ${MODEL_ENV} to the path of the saved booster")
    booster = xgb.Booster(model_file=str(path))
    booster.set_param({"nthread": 1})
    return booster


def predict(booster: Any, x: np.ndarray) -> np.ndarray:
    """Return the scores of the rows of the ``rows x 20`` array ``x``: ``inplace_predict``."""
    if len(x) == 0:
        return np.empty(0, dtype=np.float32)
    return np.asarray(booster.inplace_predict(x), dtype=np.float32)


def score(booster: Any, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Return the scores of the rows of ``batch`` (:func:`matrix`, then :func:`predict`)."""
    return predict(booster, matrix(batch))


def score_batch(booster: Any, batch: pa.RecordBatch) -> pa.RecordBatch:
    """Return the scores of ``batch`` as a record batch of :data:`OUTPUT_SCHEMA`."""
    return pa.RecordBatch.from_arrays([pa.array(score(booster, batch))], schema=OUTPUT_SCHEMA)
