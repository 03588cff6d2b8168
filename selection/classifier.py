"""The tool classifier: which namespace the scenarios like this one were served by, as one model.

The learned policy's neighbour evidence (selection/policies/learned.py) counts the successes of
each namespace on the past scenarios nearest to a call: it knows what happened close by and nothing
about the shape of a namespace's region as a whole. A softmax regression over the scenario vectors
learns that shape from every success at once: where one namespace's scenarios end and the next
one's begin, and which directions of the vector space matter for it. In the selection bench's
stream it alone is right first 0.784-0.786 of the time in the 2nd half, as often as the whole
policy was without it, and the two together 0.798-0.799 (docs/benches.md).

It starts where the policy's prior starts: the column of each namespace is its description's vector
divided by the kernel's bandwidth, so before any success its score is the description match the
prior is made of, and a namespace it has never seen is scored that way too (`score`). Each refit
(`learn_many`) goes on from the columns it has, for a fixed number of full passes of Adam over the
successes it is given: a few passes, not a fit to convergence (offline, 300 passes did a little
worse than 100), keep it from learning every noisy label by heart; a penalty term would not do it
here, as it pulls the description columns to zero (an L2 of 1e-3 halved its top-1 offline). It is
refitted in batches, on the learning worker's beat, not per outcome: in an offline replay of the
stream, one pass of per-outcome updates reached 0.783 in the 2nd half where refits every 500
queries reached 0.809.

In River's manner it is called without any service: `learn_many(vectors, names)`,
`predict_one(vector)`; `to_text` / `from_text` carry it through a text-only store.
"""

from __future__ import annotations

import base64
import io
import uuid
from collections.abc import Mapping, Sequence

import numpy as np

from selection.feedback import BANDWIDTH

EPOCHS = 30  # full passes of one refit
LEARNING_RATE = 0.02  # Adam's step size


class ToolClassifier:
    """Scores of namespaces for a scenario vector: `x . w[name] + b[name]`."""

    def __init__(self, names: Sequence[str], weights: np.ndarray, bias: np.ndarray,
                 revision: str = "", examples: int = 0, scale: float = 1.0 / BANDWIDTH) -> None:
        weights = np.asarray(weights, dtype=np.float32)
        bias = np.asarray(bias, dtype=np.float32)
        if weights.ndim != 2 or weights.shape[1] != len(names) or bias.shape != (len(names),):
            raise ValueError(f"a classifier of {len(names)} names needs weights (dim, {len(names)}) and bias "
                             f"({len(names)},), got {weights.shape} and {bias.shape}")
        if len(set(names)) != len(names):
            raise ValueError("a classifier's names must be distinct")
        if not (np.isfinite(weights).all() and np.isfinite(bias).all()):
            raise ValueError("a classifier's weights must be finite")
        self.names = list(names)
        self.index = {name: i for i, name in enumerate(self.names)}
        self.weights = weights
        self.bias = bias
        self.revision = revision
        self.examples = examples  # successes the last refit was given
        self.scale = scale  # of a description match, for the names it has no column for

    @property
    def dim(self) -> int:
        return int(self.weights.shape[0])

    @classmethod
    def from_descriptions(cls, descriptions: Mapping[str, Sequence[float]],
                          bandwidth: float = BANDWIDTH) -> ToolClassifier:
        """The untrained classifier: each namespace scored by its description match / bandwidth."""
        if not descriptions:
            raise ValueError("a classifier needs the description vector of at least one namespace")
        names = list(descriptions)
        weights = np.stack([np.asarray(descriptions[n], dtype=np.float32) for n in names], axis=1) / bandwidth
        return cls(names, weights, np.zeros(len(names), np.float32), scale=1.0 / bandwidth)

    def with_names(self, descriptions: Mapping[str, Sequence[float]]) -> ToolClassifier:
        """This classifier with a description column added for each namespace it does not know."""
        new = [n for n in descriptions if n not in self.index]
        if not new:
            return self
        added = np.stack([np.asarray(descriptions[n], dtype=np.float32) for n in new], axis=1) * self.scale
        if added.shape[0] != self.dim:
            raise ValueError(f"description vectors have {added.shape[0]} dimensions, the classifier {self.dim}")
        return ToolClassifier(self.names + new, np.concatenate([self.weights, added], axis=1),
                              np.concatenate([self.bias, np.zeros(len(new), np.float32)]),
                              self.revision, self.examples, self.scale)

    # ------------------------------------------------------------------------------- learning
    def learn_many(self, vectors: Sequence[Sequence[float]] | np.ndarray, names: Sequence[str],
                   epochs: int = EPOCHS, learning_rate: float = LEARNING_RATE,
                   max_names: int | None = None) -> ToolClassifier:
        """A refit on these successes (vector, namespace it was served by), going on from this
        classifier's columns; a new classifier with a new revision. Every name must be known
        (`with_names` first).

        `max_names`: when the classifier has more columns than this, only the `max_names`
        namespaces with the most successes here are fitted (their softmax is over themselves), the
        successes of the others are left out and their columns kept as they are. A pass costs
        time and memory in proportion to successes x columns fitted: with 20,000 successes of
        10,000 namespaces, fitting every column took 5.9 s a pass (30 passes a refit) and 3.3 GB;
        20,000 successes of 1,000 namespaces (the most the default cap fits) 0.32 s a pass and
        0.44 GB (workers/settings.py)."""
        x = np.asarray(vectors, dtype=np.float32)
        if x.ndim != 2 or x.shape[0] != len(names) or x.shape[1] != self.dim:
            raise ValueError(f"expected {len(names)} vectors of {self.dim} dimensions, got an array of shape {x.shape}")
        unknown = sorted({n for n in names if n not in self.index})
        if unknown:
            raise ValueError(f"namespaces without a column: {unknown[:5]} (add their descriptions with with_names)")
        if epochs < 1 or learning_rate <= 0 or (max_names is not None and max_names < 1):
            raise ValueError("epochs and max_names must be >= 1 and learning_rate > 0")
        targets = np.array([self.index[n] for n in names], dtype=np.int64)
        fitted = np.arange(len(self.names))
        if max_names is not None and len(self.names) > max_names:
            counts = np.bincount(targets, minlength=len(self.names))
            fitted = np.sort(np.argsort(-counts, kind="stable")[:max_names])  # most successes; ties: first registered
            column = np.full(len(self.names), -1)
            column[fitted] = np.arange(len(fitted))
            targets = column[targets]
            x = x[targets >= 0]
            targets = targets[targets >= 0]
        weights, bias = self.weights.copy(), self.bias.copy()
        if len(targets):
            weights[:, fitted], bias[fitted] = self._adam(x, targets, weights[:, fitted], bias[fitted], epochs,
                                                          learning_rate)
        return ToolClassifier(self.names, weights, bias, uuid.uuid4().hex[:12], len(names), self.scale)

    @staticmethod
    def _adam(x: np.ndarray, targets: np.ndarray, weights: np.ndarray, bias: np.ndarray, epochs: int,
              learning_rate: float) -> tuple[np.ndarray, np.ndarray]:
        """`epochs` full-batch steps of Adam on the cross-entropy of the softmax over these columns."""
        params = [weights, bias]
        moments = [np.zeros_like(p) for p in params]
        squares = [np.zeros_like(p) for p in params]
        rows = np.arange(len(targets))
        for step in range(1, epochs + 1):
            logits = x @ params[0] + params[1]
            logits -= logits.max(axis=1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(axis=1, keepdims=True)
            probs[rows, targets] -= 1.0  # d(cross-entropy)/d(logits)
            probs /= len(targets)
            for p, g, m, v in zip(params, (x.T @ probs, probs.sum(axis=0)), moments, squares, strict=True):
                m *= 0.9
                m += 0.1 * g
                v *= 0.999
                v += 0.001 * g * g
                p -= learning_rate * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
        return params[0], params[1]

    # ------------------------------------------------------------------------------- scoring
    def predict_one(self, vector: Sequence[float], names: Sequence[str] | None = None) -> dict[str, float]:
        """The score of every namespace it knows for this scenario vector, or of those of `names`
        it knows: a plan asks for its candidates' only, whose cost does not grow with the number of
        namespaces (all of 10,000: 0.8 ms)."""
        x = np.asarray(vector, dtype=np.float32)
        if x.shape != (self.dim,):
            raise ValueError(f"expected a vector of {self.dim} dimensions, got shape {x.shape}")
        if names is None:
            return dict(zip(self.names, (x @ self.weights + self.bias).tolist(), strict=True))
        known = [n for n in names if n in self.index]
        columns = [self.index[n] for n in known]
        return dict(zip(known, (x @ self.weights[:, columns] + self.bias[columns]).tolist(), strict=True))

    def score(self, scores: Mapping[str, float], name: str, similarity: float) -> float:
        """`name`'s score from `predict_one`'s answer, or, for a namespace the classifier has no
        column for yet (registered since its refit), the one its column would start with."""
        known = scores.get(name)
        return known if known is not None else similarity * self.scale

    # ------------------------------------------------------------------------------- storage
    def to_text(self) -> str:
        """Base64 of an .npz (no pickles), for a store that keeps text."""
        buffer = io.BytesIO()
        np.savez(buffer, names=np.array(self.names, dtype=str), weights=self.weights, bias=self.bias,
                 meta=np.array([self.revision, str(self.examples), repr(self.scale)], dtype=str))
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    @classmethod
    def from_text(cls, text: str | bytes) -> ToolClassifier:
        try:
            with np.load(io.BytesIO(base64.b64decode(text, validate=True)), allow_pickle=False) as data:
                revision, examples, scale = data["meta"].tolist()
                return cls(data["names"].tolist(), data["weights"], data["bias"], revision, int(examples), float(scale))
        except (ValueError, KeyError, OSError, TypeError) as exc:
            raise ValueError(f"not a stored tool classifier: {exc}") from exc
