"""`fittest bench supervised`: how much of the selection benchmark can be learned from the scenario
vectors at all, as a reference for the selection bench's targets.

The selection bench's stream starts knowing nothing and learns a query's tool only when one of its
5 attempts found it. This bench gives the tool classifier (selection/classifier.py, the model the
learned policy uses) every label there is instead: the queries are split into k folds, and each
fold is ranked by a classifier fitted on the labels of all the other folds, from the description
columns the stream starts with. Its top-1, top-5 and mean attempts (a query's attempts are its
right tool's place in the ranking, 5 when that is below the 5th) say what a stream could reach if
it had seen every other query's answer; the description match alone (what the classifier starts
from) is shown beside it. The MetaTool README expects its labels to be noisy ("even a supervised
nearest-neighbour classifier on frozen MiniLM embeddings stays below 80% top-1").
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
from pydantic import BaseModel
from threadpoolctl import threadpool_limits

from selection.classifier import ToolClassifier
from workers.bench.host import BenchResult
from workers.bench.selection import MAX_ATTEMPTS, BenchInputError, load_queries, load_tools
from workers.settings import Settings

REFERENCE_EPOCHS = 100  # passes of one fit: offline, 100 ranked best of 30, 100 and 300


class RankingScores(BaseModel):
    top1: float
    top5: float  # right tool among the first 5: resolved within 5 attempts
    mean_attempts: float  # its place in the ranking + 1, 5 when unresolved (as the selection bench counts)


class SupervisedBenchResult(BenchResult):
    queries: int
    tools: int
    folds: int
    seed: int
    epochs: int
    embedding_precision: str
    description: RankingScores  # the description match alone: the classifier before any label
    supervised: RankingScores  # the classifier fitted on the labels of the other folds
    fit_s: float  # all folds' fits
    elapsed_s: float


def ranking_scores(scores: np.ndarray, targets: np.ndarray) -> RankingScores:
    """Scores (queries x tools) and the right tool of each query, as the selection bench counts them."""
    right = scores[np.arange(len(targets)), targets]
    place = (scores > right[:, None]).sum(axis=1)  # ties go to the right tool
    return RankingScores(top1=round(float((place < 1).mean()), 4), top5=round(float((place < MAX_ATTEMPTS).mean()), 4),
                         mean_attempts=round(float(np.minimum(place + 1, MAX_ATTEMPTS).mean()), 3))


def run_supervised_bench(base: Settings, tools: Path, queries: Path, folds: int = 5, seed: int = 0,
                         epochs: int = REFERENCE_EPOCHS) -> SupervisedBenchResult:
    from workers.embedder import open_embedder

    if folds < 2:
        raise BenchInputError(f"folds must be at least 2, got {folds}")
    if epochs < 1:
        raise BenchInputError(f"epochs must be at least 1, got {epochs}")
    started = time.perf_counter()
    manifests, names = load_tools(tools)
    rows = load_queries(queries, set(names.values()))
    if len(rows) < folds:
        raise BenchInputError(f"{queries}: {len(rows)} queries cannot be split into {folds} folds")
    embedder = open_embedder(base)
    namespace_by_name = {name: ns for ns, name in names.items()}
    untrained = ToolClassifier.from_descriptions(
        dict(zip([m.name for m in manifests], embedder.embed([m.description for m in manifests]), strict=True)))
    x = np.asarray(embedder.embed([q for q, _ in rows]), dtype=np.float32)
    targets = np.array([untrained.index[namespace_by_name[label]] for _, label in rows])
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    scores = np.zeros((len(rows), len(untrained.names)), dtype=np.float32)
    fit_s = 0.0
    for fold in np.array_split(np.array(order), folds):
        train = np.setdiff1d(np.arange(len(rows)), fold)
        t0 = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"):  # as the refit runs
            fitted = untrained.learn_many(x[train], [untrained.names[t] for t in targets[train]], epochs=epochs)
        fit_s += time.perf_counter() - t0
        scores[fold] = x[fold] @ fitted.weights + fitted.bias
    return SupervisedBenchResult(
        queries=len(rows), tools=len(manifests), folds=folds, seed=seed, epochs=epochs,
        embedding_precision=embedder.precision,
        description=ranking_scores(x @ untrained.weights + untrained.bias, targets),
        supervised=ranking_scores(scores, targets), fit_s=round(fit_s, 1),
        elapsed_s=round(time.perf_counter() - started, 1),
    )
