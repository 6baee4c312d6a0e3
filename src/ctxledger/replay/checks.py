"""The checks ``verify`` makes of one session, fed its events in order; ``salvage`` shares them.

:class:`SessionCheck` folds a session's events and checks seq density, tool-call pairing,
checkpoint boundaries, served views and, where asked, stored snapshots. A ``RecordLost`` of a
salvaged log is listed, and a check it makes impossible (a view built over the lost message,
anything after a lost record that held no message) is listed with it instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.domain import (
    SNAPSHOT_VERSION,
    ModelView,
    SessionState,
    Tokenizer,
    build_view,
    remask_of,
)
from ctxledger.errors import CtxLedgerError, EventDecodeError
from ctxledger.events import (
    CheckpointCreated,
    Event,
    RecordLost,
    SessionForked,
    SessionOpened,
    ViewServed,
    carried_message,
)
from ctxledger.messages import Message
from ctxledger.replay.damage import read_until_damage
from ctxledger.replay.loading import fold_session, read_checkpoints, read_messages
from ctxledger.storage import EventLog

__all__ = ["ForkFold", "Mismatch", "SessionCheck", "fold_with_losses"]


class Mismatch(msgspec.Struct, frozen=True, kw_only=True):
    """One problem found in a log.

    Attributes:
        session: The session.
        seq: The event seq where it was found.
        kind: ``view_hash``, ``remask`` (a view's recorded re-mask, ``ViewServed.remask``, is
            not the one replay derives), ``checkpoint``, ``seq_gap``, ``message_seq``,
            ``tool_pairing``, ``corrupt`` (a record that cannot be read, at its exact seq; for a
            fork whose parent is damaged before the fork point, at its ``SessionForked`` event),
            ``snapshot`` (a stored snapshot that is damaged or does not restore the fold it was
            taken after), ``structure``, or in :attr:`VerifyReport.lost` ``record_lost``.
        expected: What the log records (for ``view_hash``: the recorded hash).
        actual: What replay derives (for ``view_hash``: the rebuilt hash).
        detail: A sentence for people.
    """

    session: str
    seq: int
    kind: str
    expected: str = ""
    actual: str = ""
    detail: str = ""


#: Folds a fork's parent through an event seq; returns the state and the parent prefix's
#: losses (message seqs of stand-ins; the first lost record without a message, if any).
ForkFold = Callable[[str, int], tuple[SessionState, set[int], int | None]]


class SessionCheck:
    """The checks of one session, fed its events in order (``verify`` and ``salvage`` share it).

    Args:
        session_id: The session.
        tokenizer: The tokenizer the host used.
        fork_fold: Folds a fork's parent through the fork point.
    """

    def __init__(self, session_id: str, tokenizer: Tokenizer, fork_fold: ForkFold) -> None:
        self.session_id = session_id
        self.tokenizer = tokenizer
        self.fork_fold = fork_fold
        self.state: SessionState | None = None
        self.opened: SessionOpened | None = None
        self.previous = 0
        self.events = self.views = self.checkpoints = 0
        self.mismatches: list[Mismatch] = []
        self.lost: list[Mismatch] = []
        self.lost_messages: set[int] = set()
        self.lost_event: int | None = None  # the first lost record that held no message

    def report(
        self, seq: int, kind: str, detail: str, expected: str = "", actual: str = ""
    ) -> None:
        """Record a mismatch."""
        self.mismatches.append(
            Mismatch(
                session=self.session_id,
                seq=seq,
                kind=kind,
                expected=expected,
                actual=actual,
                detail=detail,
            )
        )

    def feed(self, seq: int, event: Event) -> bool:
        """Check one event and fold it; False once the fold cannot go on."""
        self.events += 1
        if seq != self.previous + 1:
            self.report(seq, "seq_gap", f"events {self.previous + 1}..{seq - 1} are missing")
        self.previous = seq
        state = self.state
        if state is None:
            if not isinstance(event, SessionOpened):
                self.report(seq, "structure", "the log does not start with SessionOpened")
                return False
            self.opened, state = event, SessionState.new(self.session_id, event.config)
            self.state = state
        elif isinstance(event, SessionForked):
            assert self.opened is not None
            try:
                state, lost, lost_event = self.fork_fold(event.parent_id, event.parent_event_seq)
            except EventDecodeError as exc:
                self.report(
                    seq,
                    "corrupt",
                    f"parent {event.parent_id!r} is damaged before the fork point "
                    f"(event {event.parent_event_seq}): {exc}",
                )
                return False
            state.rebase(self.session_id, self.opened.config)
            self.state = state
            self.lost_messages |= lost
            self.lost_event = self.lost_event or lost_event
        elif isinstance(event, RecordLost):
            self._note_loss(seq, event)
        elif isinstance(event, CheckpointCreated):
            self.checkpoints += 1
            self._check_checkpoint(state, event, seq)
        elif isinstance(event, ViewServed):
            self.views += 1
            self._check_view(state, event, seq)
        message = carried_message(event)
        if message is not None:
            self._check_message(state, message, seq)
        try:
            state.apply(event)
        except CtxLedgerError as exc:
            # The fold cannot go on past an impossible event; what made it so is reported.
            if not self.mismatches or self.mismatches[-1].seq != seq:
                self.report(seq, "structure", f"event cannot be folded: {exc}")
            return False
        return True

    def _note_loss(self, seq: int, event: RecordLost) -> None:
        message = event.message
        if message is not None and message.seq is not None:
            self.lost_messages.add(message.seq)
            what = f"message {message.seq} ({message.role}) was lost"
        else:
            self.lost_event = self.lost_event or seq
            kind = f"a {event.lost_type} record" if event.lost_type else "a record"
            what = f"{kind} that held no message was lost"
        self.lost.append(
            Mismatch(
                session=self.session_id,
                seq=seq,
                kind="record_lost",
                detail=f"{what} ({event.reason}): {event.detail}",
            )
        )

    def _excuse(self, seq: int, kind: str, detail: str, through: int) -> bool:
        """List a failed check with the losses (and return True) when a loss explains it.

        A check over history through message ``through`` depends on every message up to it: a
        view shows some raw, masks others by their size and lists facts of the ones its
        summary covers. So a lost message at or before ``through`` explains it, as does any
        earlier lost record that held no message (what it was is unknown).
        """
        lost = [m for m in self.lost_messages if m <= through]
        if lost:
            why = f"it was built over lost message {min(lost)}"
        elif self.lost_event is not None:
            why = f"a record before it was lost (event {self.lost_event})"
        else:
            return False
        self.lost.append(
            Mismatch(
                session=self.session_id,
                seq=seq,
                kind=kind,
                detail=f"{detail}: not comparable, {why}",
            )
        )
        return True

    def _check_view(self, state: SessionState, event: ViewServed, seq: int) -> None:
        view = build_view(state, tokenizer=self.tokenizer)
        if view.view_hash != event.view_hash or view.through_seq != event.through_seq:
            detail = f"the view served at message seq {event.through_seq} does not rebuild"
            if not self._excuse(seq, "view_hash", detail, event.through_seq):
                self.report(
                    seq, "view_hash", detail, expected=event.view_hash, actual=view.view_hash
                )
        elif event.remask is not None:
            # Logs written before the field existed record None: nothing to compare.
            remask = remask_of(state, view, tokenizer=self.tokenizer)
            if remask != event.remask:
                detail = (
                    f"the re-mask recorded with the view at message seq {event.through_seq} "
                    "does not rebuild"
                )
                if not self._excuse(seq, "remask", detail, event.through_seq):
                    self.report(
                        seq, "remask", detail, expected=repr(event.remask), actual=repr(remask)
                    )

    def _check_message(self, state: SessionState, message: Message, seq: int) -> None:
        if message.seq != state.last_seq + 1:
            self.report(seq, "message_seq", f"message seq {message.seq} follows {state.last_seq}")
        if message.role == "tool" and message.tool_call_id not in state.open_tool_calls():
            self.report(
                seq,
                "tool_pairing",
                f"tool result {message.tool_call_id!r} answers no open call",
            )

    def _check_checkpoint(self, state: SessionState, event: CheckpointCreated, seq: int) -> None:
        checkpoint = event.checkpoint
        active = state.active_checkpoint
        problems = []
        if checkpoint.previous_checkpoint_id != (active.id if active else None):
            problems.append(f"checkpoint {checkpoint.id} does not extend the active one")
        if not checkpoint.covers_through_seq < checkpoint.retain_from_seq <= state.last_seq + 1:
            problems.append(f"checkpoint {checkpoint.id} has an impossible range")
        else:
            if active is not None and checkpoint.retain_from_seq <= active.retain_from_seq:
                problems.append(f"checkpoint {checkpoint.id} does not cut after the previous one")
            problems += _split_calls(state, checkpoint.id, checkpoint.retain_from_seq)
        for problem in problems:
            if not self._excuse(seq, "checkpoint", problem, state.last_seq):
                self.report(seq, "checkpoint", problem)

    def check_snapshot(self, log: EventLog, seq: int) -> bool:
        """Compare the stored snapshot taken after event ``seq`` with the fold (now at ``seq``).

        Returns whether a snapshot was compared (one of another version is skipped: the host
        ignores it as well).
        """
        assert self.state is not None
        found = log.load_snapshot(self.session_id, seq)
        if found is None or found[0] != seq:
            self.report(seq, "snapshot", f"the snapshot taken after event {seq} is damaged")
            return True
        data = found[1]
        try:
            version = _version.decode(data).version
        except (msgspec.DecodeError, ValueError):
            version = SNAPSHOT_VERSION  # undecodable: reported below
        if version != SNAPSHOT_VERSION:
            return False
        try:
            restored = SessionState.from_snapshot(
                data,
                lambda first, last: read_messages(log, self.session_id, first, last),
                lambda: read_checkpoints(log, self.session_id, seq),
            )
        except EventDecodeError as exc:
            self.report(seq, "snapshot", f"the snapshot taken after event {seq}: {exc}")
            return True
        mine, theirs = self._view(self.state), self._view(restored)
        if (restored.last_seq, theirs.view_hash) != (self.state.last_seq, mine.view_hash):
            self.report(
                seq,
                "snapshot",
                f"the snapshot taken after event {seq} does not restore the fold",
                expected=mine.view_hash,
                actual=theirs.view_hash,
            )
        return True

    def _view(self, state: SessionState) -> ModelView:
        return build_view(state, tokenizer=self.tokenizer)


class _SnapshotVersion(msgspec.Struct):
    version: int = 0


_version = msgspec.msgpack.Decoder(_SnapshotVersion)


def _split_calls(state: SessionState, checkpoint_id: str, retain_from: int) -> list[str]:
    calls: set[str] = set()
    for message in state.history[retain_from - 1 :]:
        calls.update(call.id for call in message.tool_calls)
        if message.role == "tool" and message.tool_call_id not in calls:
            return [
                f"checkpoint {checkpoint_id} splits tool result seq {message.seq} from its call"
            ]
    return []


def fold_with_losses(
    log: EventLog, session_id: str, through: int
) -> tuple[SessionState, set[int], int | None]:
    """Fold a session through event ``through``; also return what its salvage lost there.

    Returns:
        The state, the seqs of the lost messages it holds (its fork ancestry's included) and
        the first lost record that held no message (None if none).

    Raises:
        EventDecodeError: A record up to ``through`` cannot be read.
    """
    state, _ = fold_session(log, session_id, through_event_seq=through, use_snapshots=False)
    return (state, *_losses(log, session_id, through))


def _losses(log: EventLog, session_id: str, through: int) -> tuple[set[int], int | None]:
    messages: set[int] = set()
    first_event: int | None = None
    for seq, event in read_until_damage(log, session_id, 1, through):
        if isinstance(event, SessionForked):
            inherited, earlier = _losses(log, event.parent_id, event.parent_event_seq)
            messages |= inherited
            first_event = first_event or earlier
        elif isinstance(event, RecordLost):
            if event.message is not None and event.message.seq is not None:
                messages.add(event.message.seq)
            else:
                first_event = first_event or seq
    return messages, first_event
