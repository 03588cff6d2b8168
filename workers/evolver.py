"""One evolution, on the evolution worker: lock the namespace, ask the mutators, verify each
candidate in the sandbox, install and promote the first one that passes, and report.

What this worker may touch: the tool files (it reads the parent's folder, stages candidates under
`data_dir/evolving/` and installs the winner under `data_dir/evolved/name_v1_1_0/`), Redis (lock,
changelog, promotion) and subprocesses. It never opens the embedder or the vector store: what it
needs from memory is in the job, and what memory should learn leaves as an `EvolutionRecord`
(`publish`, which the task sends to `fittest.record_evolution`).
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from evolution.models import (
    KEPT_INPUT_BYTES,
    CandidateReport,
    CandidateVersion,
    ChangelogEntry,
    Evidence,
    EvolutionJob,
    EvolutionRecord,
    EvolutionReport,
    EvolutionStatus,
    made_by,
    tests_digest,
)
from evolution.call_route import route_call
from evolution.ports import Changelog
from evolution.mutation import MutationContext, Mutator, MutatorConfig, ParentTool, load_mutators, order_for
from evolution.promotions import promote_on_trial
from evolution.served_version import fallback_version, head_version, served_original
from evolution.verification import Sandbox, VerifyConfig, reproduce_successes, run_test_cases, verified_reason, verify
from evolution.versioning import MANIFEST_FILE, next_version, version_dir
from selection.manifest import HttpImplementation, ToolManifest, load_manifest, tool_key
from selection.models import CallPlan, Promotion
from selection.ports import StateStore
from selection.registry import ToolRegistry
from workers.evolution_jobs import CANDIDATE_NOT_WRITTEN, EvolutionUnavailable, call_failures
from workers.renewed_lock import renewed
from workers.runners import RunLimits
from workers.sandbox import SubprocessSandbox
from workers.settings import Settings
from workers.tool_catalog import evolved_dir, load_registry
from workers.tool_files import FolderTooLarge, version_files

log = logging.getLogger("fittest.evolution")

# The namespace's lock is a lease: taken for LOCK_LEASE_S and renewed every third of it while the
# evolution runs, so an evolver killed with SIGKILL (no `finally` runs) frees the namespace within
# LOCK_LEASE_S. A lock held for the whole time limit (960 s with the defaults) kept it locked that
# long: every failed call of the namespace waited FITTEST_EVOLUTION_LOCK_WAIT_S in the evolver's
# only slot, other namespaces' evolutions queued behind, and each ended "another evolution is
# running" while none was (QA O).
LOCK_LEASE_S = 30.0
LOCK_POLL_S = 0.5

Publish = Callable[[EvolutionRecord], None]


def read_parent(manifest: ToolManifest) -> ParentTool:
    """The parent's folder as files (manifests, caches and hidden files left out)."""
    return ParentTool(manifest=manifest, files=version_files(manifest))


# A file that starts so is run directly by the kernel (a script with its interpreter line, an ELF program).
RUNNABLE_MAGIC = (b"#!", b"\x7fELF")
# Errors of the machine, not of a candidate, as one is written: a full or read-only data directory
MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO})


def write_version(folder: Path, manifest: ToolManifest, files: dict[str, bytes]) -> ToolManifest:
    """Write a version's files and manifest into `folder`; the manifest as loaded from there."""
    folder.mkdir(parents=True, exist_ok=False)
    for rel, data in files.items():
        target = (folder / rel).resolve()
        if not target.is_relative_to(folder.resolve()):
            raise ValueError(f"file {rel!r} of {manifest.key} would land outside {folder}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        if data.startswith(RUNNABLE_MAGIC):  # files travel as bytes, without their mode: a script or
            target.chmod(0o755)  # program an argv may name directly ({tool_dir}/run.sh) must stay runnable
    doc = manifest.model_dump(mode="json", exclude={"tool_dir"}, exclude_none=True)
    (folder / MANIFEST_FILE).write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return load_manifest(folder / MANIFEST_FILE)


def mutator_config(settings: Settings) -> MutatorConfig:
    """The settings' values of every MutatorConfig field (each one is a Settings field of that name)."""
    return MutatorConfig.model_validate({name: getattr(settings, name) for name in MutatorConfig.model_fields})


class Evolver:
    def __init__(
        self,
        settings: Settings,
        state: StateStore,
        ledger: Changelog,
        publish: Publish,
        *,
        mutators: list[Mutator] | None = None,
        sandbox: Sandbox | None = None,
        registry: Callable[[], ToolRegistry] | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.ledger = ledger
        self.publish = publish
        # The tools as this process serves them, for the original a namespace serves where its
        # promotion names none, read by `without_evolution` on each failed call: the worker's own
        # registry where it has one, else read from disk. An evolution reads them afresh (`run`).
        self.registry = registry or (lambda: load_registry(settings))
        self.load_errors: list[str] = []
        if mutators is None:
            mutators, self.load_errors = load_mutators(mutator_config(settings))
        self.mutators = mutators
        self._evolving_with: ToolRegistry | None = None  # the registry the evolution at hand reads (`_evolve`)
        self.sandbox = sandbox or SubprocessSandbox(RunLimits.from_settings(settings), self._http_root)
        self.verify_config = VerifyConfig(
            static_timeout_s=settings.verify_static_timeout_s,
            stage_timeout_s=settings.verify_stage_timeout_s,
            replay_successes=settings.verify_replay_successes,
        )

    # ----------------------------------------------------------------------------- locking
    def run(self, job: EvolutionJob) -> EvolutionReport:
        """Evolve `job.parent_key` unless the namespace is being evolved already.

        A call waits (up to FITTEST_EVOLUTION_LOCK_WAIT_S) for the other evolution, then retries
        with what it produced, or evolves itself if it produced nothing; a manual or quality
        trigger is skipped at once.

        A failed call's evolution first takes its route (evolution/call_route.py): it ends "pinned"
        or "reused" without evolving, or evolves the version the route names. A pinned call that
        evolves the version its namespace serves is not retried (workers/tasks/evolution.py): it
        would run its pinned version again.

        The lock is a lease of LOCK_LEASE_S, renewed while the evolution runs: a run killed with it
        frees the namespace within that time. Its owner is the job: a job that finds its own id
        there was delivered again after the run that took it was killed (the broker gives a message
        back once its worker is lost, or after the visibility timeout, which outlasts the task's
        time limit), and takes the lock over at once. Waiting out the TTL, it would end "locked"
        behind itself.
        """
        started = time.monotonic()
        if not self.settings.evolution_enabled:
            return self._report(job, "disabled", started, message="evolution is off (FITTEST_EVOLUTION_ENABLED=false)")
        lock = f"evolve:{job.namespace}"
        ttl = LOCK_LEASE_S
        wait_until = started + (self.settings.evolution_lock_wait_s if job.trigger == "call" else 0.0)
        while not self.state.acquire_lock(lock, job.job_id, ttl, reclaim=True):
            if time.monotonic() >= wait_until:
                message = f"another evolution of {job.namespace} is running; this one was skipped"
                self.ledger.log(ChangelogEntry(namespace=job.namespace, event="locked", parent=job.parent_version,
                                               reason=message, job_id=job.job_id, trigger=job.trigger))
                return self._report(job, "locked", started, message=message)
            time.sleep(LOCK_POLL_S)
        with renewed(self.state, lock, job.job_id, ttl):
            try:
                registry = load_registry(self.settings)  # a fresh view: other processes may have added versions
                if job.trigger == "call" and job.plan is not None:
                    promotion = self.state.promotion(job.namespace)
                    route = route_call(job.plan, job.namespace, job.parent_version, job.served_version, promotion,
                                       served_original(promotion, registry, job.namespace))
                    if route.action == "pinned":
                        pinned = job.plan.request.version or ""
                        return self._report(job, "pinned", started, version=route.version, message=(
                            f"this call is pinned to {tool_key(job.namespace, pinned)}, and "
                            f"{self._serving(job.namespace, route.version, promotion)}; so it was neither retried "
                            f"with {route.version} nor was {pinned} evolved"))
                    if route.action == "reused":
                        return self._report(job, "reused", started, version=route.version, message=(
                            f"{self._serving(job.namespace, route.version, promotion)}, and was not tried; the call "
                            "retries with it"))
                    job = job.model_copy(update={"parent_version": route.version})
                return self._evolve(job, started, registry)
            finally:
                # A run of this job killed mid-evolution left its staging; a run that ends before
                # evolving ("reused") would leave it for good (QA O: after SIGKILL of the evolver).
                shutil.rmtree(self.settings.data_dir / "evolving" / job.job_id, ignore_errors=True)

    def _serving(self, namespace: str, version: str, promotion: Promotion | None) -> str:
        """How the namespace serves `version` to the calls not pinned: all of them, or a trial's
        share (QA evolution M2: a version on trial was said to be promoted and to serve every call
        not pinned, while its parent served 75 % of them)."""
        key = tool_key(namespace, version)
        if promotion is not None and promotion.status == "on_trial" and version == promotion.evolved_version:
            share = self.settings.trial_share
            rest = fallback_version(promotion) or promotion.original_version
            return (f"{key} is on trial, serving {share:.0%} of the calls not pinned "
                    f"({tool_key(namespace, rest)} serves the rest)")
        return f"{key} serves the calls not pinned"

    # ----------------------------------------------------------------------------- evolving
    def _http_root(self, manifest: ToolManifest) -> HttpImplementation | None:
        """A candidate's (or its parent's) http settings, as the evolution at hand reads its tools."""
        return self._evolving_with.http_root(manifest) if self._evolving_with is not None else None

    def _evolve(self, job: EvolutionJob, started: float, registry: ToolRegistry) -> EvolutionReport:
        before = self.state.promotion(job.namespace)  # what it serves as the evolution starts; a change meanwhile wins
        self._evolving_with = registry
        parent = registry.get(job.parent_key)
        original = registry.original(job.namespace)
        if parent is None or original is None:
            # QA live F10: "is not registered" read as if the tool had gone, while its workers served it
            return self._finish(job, started, [], [], None, why=f"{job.parent_key} is not in the tools directory as the "
                                "evolver reads it now (its manifest or its module refused, or gone: `fittest tools --refused`)")
        root = evolved_dir(self.settings)
        version = next_version(parent.version, [m.version for m in registry.versions(job.namespace)])
        while version_dir(root, job.namespace, version).exists():  # a folder a failed load left behind
            version = next_version(version, [version])
        try:
            ctx = MutationContext(parent=read_parent(parent), evidence=job.evidence, version=version, trigger=job.trigger,
                                  deadline=started + self.settings.evolution_budget_s)
        except (OSError, FolderTooLarge) as exc:
            return self._finish(job, started, [], [], None, why=f"cannot read {parent.key}'s files: {exc}")

        notes = list(self.load_errors) + self._held_back(job) + self._unanswered(job) + self._unkept(job)
        reports: list[CandidateReport] = []

        @functools.cache
        def replayed() -> Evidence:
            """The evidence with the parent's reproducible successes marked: the parent runs them
            again once per evolution, and only when a candidate that changes behaviour gets that far."""
            return reproduce_successes(parent, job.evidence, self.sandbox, self.verify_config)

        staging = self.settings.data_dir / "evolving" / job.job_id
        # A run of this job that was killed leaves its staging behind, and a candidate cannot be
        # written over it; this run holds the job's lock, so no other run of the job uses it.
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for mutator in order_for(self.mutators, job.evidence):
                try:
                    proposal = mutator.propose(ctx)
                except Exception as exc:  # a mutator's bug ends its proposal, not the evolution
                    log.exception("mutator %s failed", mutator.name)
                    notes.append(f"{mutator.name}: failed: {type(exc).__name__}: {exc}")
                    continue
                if not proposal.candidates:
                    notes.append(f"{mutator.name}: {proposal.note}")
                for candidate in proposal.candidates:
                    if time.monotonic() - started > self.settings.evolution_budget_s:
                        notes.append(f"budget of {self.settings.evolution_budget_s:g}s spent; {candidate.mutator} not verified")
                        return self._finish(job, started, reports, notes, None)
                    report, installed = self._try(job, candidate, staging / str(len(reports)), root, replayed)
                    reports.append(report)
                    if installed is not None:
                        promoted = promote_on_trial(self.state, self.ledger, installed, parent, original.version,
                                                    before=before, reason=job.reason or job.pattern,
                                                    mutation=candidate.mutation, job_id=job.job_id, trigger=job.trigger,
                                                    elapsed_s=round(time.monotonic() - started, 3))
                        if promoted is None:
                            now = self.state.promotion(job.namespace)
                            notes.append(f"{installed.key} is not on trial: what {job.namespace} serves changed during the "
                                         f"evolution ({tool_key(job.namespace, now.evolved_version if now else original.version)}, "
                                         f"{now.status if now else 'original'}) and stays served; "
                                         f"`fittest promote {job.namespace} {installed.version}` serves it")
                        return self._finish(job, started, reports, notes, installed, promoted=promoted is not None)
            return self._finish(job, started, reports, notes + self._own_tests_fail(parent, reports), None)
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _own_tests_fail(self, parent: ToolManifest, reports: list[CandidateReport]) -> list[str]:
        """A note when candidates failed the tool's own test cases and the tool fails them too. Where
        it answers a case otherwise than the case expects, the case is the likelier mistake (a wrong
        `expect`), which no candidate can pass, and its author is the one to tell (QA evolution F2:
        every evolution failed "tests", and nothing said the original failed the same test case).
        Where it gives no output (a timeout, a crash), the expect is not in question: the tool is
        broken on that input, and saying "check their expect" misled (QA onboarding L2). The parent
        runs them once, only then."""
        if not any(r.stages and r.stages[-1].stage == "tests" and not r.stages[-1].passed for r in reports):
            return []
        own, _, failed = run_test_cases(parent, self.sandbox, self.verify_config)
        mismatched = [p for p in own.problems if p not in failed]
        notes = []
        if mismatched:
            notes.append(f"{parent.key} fails its own test cases too ({'; '.join(mismatched)}): every candidate is "
                         "checked against them, so check their expect in its manifest")
        if failed:
            notes.append(f"{parent.key} fails its own test cases too, giving no output ({'; '.join(failed)}): the tool "
                         "itself fails on them, not their expect, and no candidate made it pass them")
        return notes

    @staticmethod
    def _held_back(job: EvolutionJob) -> list[str]:
        """A note when the version evolved is the call's held back by its circuit breaker, which did
        not run in it: what the mutators read of it is its remembered failures, not the call's input
        (QA evolution: "no mutator could propose a version of title_case@1.0.0", and nothing said
        that title_case had not run)."""
        if job.plan is None or job.parent_key not in job.plan.held_back:
            return []
        remembered = len(job.evidence.failures)
        return [f"{job.parent_key} did not run in this call (held back by its circuit breaker): evolved from "
                f"{remembered} remembered failure{'s' if remembered != 1 else ''} of its own"]

    @staticmethod
    def _unkept(job: EvolutionJob) -> list[str]:
        """A note of the failures remembered without their input, which no mutator is given: a
        no_fix after a timeout on a large input said only "no mutator could propose" (QA 49)."""
        n = job.evidence.unkept_failures
        if not n:
            return []
        return [f"{n} failure{'s' if n != 1 else ''} of {job.parent_key} had {'an input' if n == 1 else 'inputs'} too "
                f"large to keep (over {KEPT_INPUT_BYTES // 1024} KB): no mutator is given {'it' if n == 1 else 'them'}, "
                "as no replay could check a fix"]

    def _unanswered(self, job: EvolutionJob) -> list[str]:
        """A note per failure class of the call that no loaded mutator answers (crash, bad output:
        only the code mutator rewrites a tool for them, and it is off without FITTEST_LLM_URL), so
        that a no_fix says why rather than only what the other mutators found nothing to do."""
        handled = {c for m in self.mutators for c in m.handles}
        rewrites = any(m.name == "code" for m in self.mutators)
        notes = []
        for cls in dict.fromkeys(f.error_class for f in job.evidence.failures):
            if cls in handled or rewrites:
                continue
            off = " (the code mutator, which rewrites a tool, is off: FITTEST_LLM_URL is unset)" if not self.settings.llm_url else ""
            notes.append(f"{cls.value}: no mutator answers this failure class{off}")
        return notes

    def without_evolution(self, plan: CallPlan) -> EvolutionReport | None:
        """The evolution a call whose every candidate failed would end with, when it is known
        before one is queued: a no_fix, when the call's route (evolution/call_route.py, as `run`
        takes it) evolves the version whose failures the call brings, and no loaded mutator
        answers any of their failure classes (a crash with the code mutator off). Asked by the
        execution worker; None: queue the evolution.

        A call of a tool that crashes now and then went through the memory worker and the evolver
        each time, waiting for the evolver's slot and the namespace's lock, for the same answer
        (QA onboarding M2: 15 no_fix in 7 minutes). A version held back by its breaker is evolved
        from remembered failures, which memory has, so that route is left to the evolver, as are
        "pinned" and "reused". A mutator for another class that memory's similar failures bring up
        could not make the call's input succeed: its candidate replays that input, and fails, or
        passes by the luck of a flaky tool. The no_fix is `run`'s own (`_no_fix`), logged once
        while nothing else is logged for the namespace."""
        if not self.settings.evolution_enabled:
            return None
        named = plan.namespace
        named_promotion = self.state.promotion(named) if named else None
        try:
            namespace, version, failures = call_failures(plan, head_version(named_promotion))
        except EvolutionUnavailable:
            return None
        if version is None or not failures:
            return None
        promotion = named_promotion if namespace == named else self.state.promotion(namespace)
        head = head_version(promotion)
        route = route_call(plan, namespace, version, head, promotion, served_original(promotion, self.registry(), namespace))
        if route.action != "evolve" or all(f.version != route.version for f in failures):
            return None  # pinned, reused, or a version whose failures memory has: the evolver's
        job = EvolutionJob(job_id="", namespace=namespace, parent_version=route.version, served_version=head, trigger="call",
                           evidence=Evidence(failures=failures), plan=plan)
        unanswered = self._unanswered(job)
        if len(unanswered) < len({f.error_class for f in failures}):
            return None
        return self._no_fix(job, time.monotonic(), [], list(self.load_errors) + unanswered)

    def _try(self, job: EvolutionJob, candidate: CandidateVersion, stage_dir: Path, root: Path,
             replayed: Callable[[], Evidence]) -> tuple[CandidateReport, ToolManifest | None]:
        """Skip, or verify in a staging folder and install; the report, and the installed manifest.

        A candidate is skipped when the same mutation (by `identity`) failed before for a similar
        reason that still applies (`Evidence.failed_before`).
        """
        # Every candidate of an evolution is written as the same next version, which only the one
        # installed becomes: a skipped or failed candidate's line names no version, which would
        # read as one that exists (the verified one's line names it).
        entry = ChangelogEntry(namespace=job.namespace, event="skipped", parent=job.parent_version,
                               mutator=candidate.mutator, mutation=candidate.mutation, job_id=job.job_id,
                               trigger=job.trigger)
        report = CandidateReport(mutator=candidate.mutator, mutation=candidate.mutation, identity=candidate.identity, outcome="skipped")
        tests = tests_digest(candidate.manifest)
        earlier = job.evidence.failed_before(candidate.mutator, candidate.identity, self.settings.evolution_similar_reason, tests)
        if earlier is not None:
            # The changelog's line leaves the similarity out: it moves with each call's failure, and
            # a skip that repeats is logged once only when its lines say the same (QA evolution M1).
            self.ledger.log_unless_repeated(entry.model_copy(update={"reason": f"failed before for a similar reason: {earlier.reason}"}))
            shown = f"failed before for a similar reason ({earlier.similarity:.2f}): {earlier.reason}"
            return report.model_copy(update={"reason": shown}), None
        twin = self._served_twin(job, candidate)
        if twin is not None:
            reason = f"{twin}, is this mutation of {job.parent_key} already"
            self.ledger.log_unless_repeated(entry.model_copy(update={"reason": reason}))
            return report.model_copy(update={"reason": reason}), None
        try:
            staged = write_version(stage_dir, candidate.manifest, candidate.files)
        except Exception as exc:  # a candidate whose manifest or files cannot even be written, or a full disk
            machines = isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS
            reason = f"{CANDIDATE_NOT_WRITTEN if machines else 'static: cannot write the candidate'}: {type(exc).__name__}: {exc}"
            self.ledger.log(_dated(entry, event="failed", reason=reason))
            return report.model_copy(update={"outcome": "failed", "reason": reason}), None
        evidence = replayed() if candidate.changes_behaviour else job.evidence  # same code: nothing to compare
        stages = verify(staged, evidence, self.sandbox, self.verify_config, changes_behaviour=candidate.changes_behaviour)
        failed = next((s for s in stages if not s.passed), None)
        if failed is not None:
            reason = f"{failed.stage}: {failed.problems[0] if failed.problems else 'failed'}"
            self.ledger.log(_dated(entry, event="failed", reason=reason, stages=stages))
            return report.model_copy(update={"outcome": "failed", "reason": reason, "stages": stages,
                                             "failed_tests": tests if failed.stage == "tests" else ""}), None
        final = version_dir(root, job.namespace, candidate.manifest.version)
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage_dir, final)
        installed = load_manifest(final / MANIFEST_FILE)
        self.ledger.log(_dated(entry, event="verified", version=installed.version,
                               reason=verified_reason(stages), stages=stages))
        return report.model_copy(update={"outcome": "verified", "stages": stages}), installed

    def _served_twin(self, job: EvolutionJob, candidate: CandidateVersion) -> str | None:
        """The version the namespace serves, or has on trial, that the same mutation of the same
        parent made, if it does, as a reason names it: verified and put on trial against it, the
        candidate would be tried against itself (QA 52c N5: `fittest evolve NAME --version 1.0.0`,
        with 1.1.0 active, made 1.2.0 of the same longer timeout, and the trial compared two
        identical versions). Only of a mutation its text names whole: the changelog keeps the text,
        not the code mutator's digest of its files, and two rewrites the model describes alike may
        differ."""
        promotion = self.state.promotion(job.namespace)
        served = head_version(promotion)
        if promotion is None or served is None or candidate.identity != candidate.mutation:
            return None
        made = made_by(self.ledger.changelog(job.namespace), served)
        if made is None or (made.parent, made.mutator, made.mutation) != (job.parent_version, candidate.mutator, candidate.mutation):
            return None
        twin = tool_key(job.namespace, served)
        # QA 53a: "which NAME serves" was said of a version on trial too
        return f"{twin}, on trial in {job.namespace}" if promotion.status == "on_trial" else f"{twin}, which {job.namespace} serves"

    # ----------------------------------------------------------------------------- reporting
    def _finish(self, job: EvolutionJob, started: float, reports: list[CandidateReport], notes: list[str],
                installed: ToolManifest | None, promoted: bool = True, why: str | None = None) -> EvolutionReport:
        """The evolution's record published and its report; `why`: what stopped it before any mutator
        was asked, said as its message (QA recheck: "no mutator could propose" was said instead)."""
        root = evolved_dir(self.settings).resolve()
        self.publish(
            EvolutionRecord(
                job_id=job.job_id,
                namespace=job.namespace,
                pattern=job.pattern,
                candidates=reports,
                promoted_version=installed.version if installed else None,
                manifest_path=str(Path(installed.tool_dir, MANIFEST_FILE).relative_to(root)) if installed and installed.tool_dir else None,
            )
        )
        if installed is not None:
            winner = reports[-1]
            return self._report(job, "evolved", started, version=installed.version, mutation=winner.mutation,
                                candidates=reports, notes=notes,
                                message=f"{installed.key} ({winner.mutation}) passed verification and "
                                        + ("is on trial" if promoted else "is a fallback: " + notes[-1]))
        return self._no_fix(job, started, reports, notes, why)

    def _no_fix(self, job: EvolutionJob, started: float, reports: list[CandidateReport], notes: list[str],
                why: str | None = None) -> EvolutionReport:
        """An evolution that installed nothing: its report, and its changelog line, logged unless
        the namespace's last line says the same (the same version failing the same way again)."""
        skipped = [r for r in reports if r.outcome == "skipped"]
        repeated = sum(r.reason.startswith("failed before") for r in skipped)
        # a skip for another reason (the served version's twin) says its own (QA 53a: "skipped as failed before")
        others = [r.reason for r in skipped if not r.reason.startswith("failed before")]
        unwritten = sum(r.outcome == "failed" and r.reason.startswith(CANDIDATE_NOT_WRITTEN) for r in reports)
        counts = [f"{sum(r.outcome == 'failed' for r in reports) - unwritten} candidate(s) failed verification"]
        # the machine's, not the candidates' (QA 59e: "failed verification" of one the disk kept out)
        counts += [f"{unwritten} not written: {next(r.reason for r in reports if r.reason.startswith(CANDIDATE_NOT_WRITTEN))}"
                   ] if unwritten else []
        counts += [f"{repeated} skipped as failed before"] if repeated or not others else []
        counts += [f"1 skipped: {reason}" for reason in others]
        message = why or (
            f"no verified version of {job.parent_key}: {', '.join(counts)}" if reports
            else f"no mutator could propose a version of {job.parent_key}"
        )
        self.ledger.log_unless_repeated(ChangelogEntry(
            namespace=job.namespace, event="no_fix", parent=job.parent_version, reason="; ".join([message, *notes])[:2000],
            job_id=job.job_id, trigger=job.trigger, elapsed_s=round(time.monotonic() - started, 3)))
        return self._report(job, "no_fix", started, candidates=reports, notes=notes, message=message)

    def _report(self, job: EvolutionJob, status: EvolutionStatus, started: float, **fields: object) -> EvolutionReport:
        report = EvolutionReport(job_id=job.job_id, namespace=job.namespace, trigger=job.trigger, status=status,
                                 parent=job.parent_key, elapsed_s=round(time.monotonic() - started, 3), **fields)
        log.info("evolution of %s: %s", job.parent_key, status, extra={
            "event": "evolution", "namespace": job.namespace, "status": status, "trigger": job.trigger,
            "parent": job.parent_key, "version": report.version, "elapsed_s": report.elapsed_s,
            "call_id": job.plan.request.call_id if job.plan is not None else None})  # QA recheck: followed by call_id
        return report


def _dated(entry: ChangelogEntry, **verdict: Any) -> ChangelogEntry:
    """A candidate's changelog entry with its verdict, dated when the verdict came, not when its
    verification began (QA 49 recheck N6)."""
    return entry.model_copy(update={**verdict, "time": time.time()})
