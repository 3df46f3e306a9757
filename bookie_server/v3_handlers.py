"""The bookie's v3 (protobuf) requests: one handler per operation, looked up in a table (a room of
:class:`~bookie_server.connection.Connection`).

As ``BookieRequestProcessor`` does (4.17): a request for an unknown operation, or without its sub-message, gets
EBADREQ with its header echoed; a request of another protocol version gets EBADVERSION; each handler answers with
the status its Java ``*ProcessorV3`` gives (docs/protocol.md).  Long polls wait in a task of their own, so a
connection goes on serving while one waits for the LAC to move.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial

from bkspark.errors import BookieError, MalformedFrameError, NoSuchEntryError, NoSuchLedgerError, status_for_error
from bkspark.protocol import v2, v3
from bkspark.protocol.digest import entry_header, lac_header
from bkspark.protocol.proto import BookkeeperProtocol_pb2 as pb

from bookie_server.limits import InFlightGate
from bookie_server.metrics import now_ms as _now_ms

__all__ = ["V3Handlers"]


class V3Handlers:
    """Handlers of v3 requests (event-loop thread); each answers through the connection's ``send_v3`` and gives its
    permit back (:class:`~bookie_server.admission.Admission`) when it answers."""

    def _handle_v3(self, request: pb.Request) -> None:
        op = request.header.operation
        handler = self._V3_HANDLERS.get(op)
        sub = v3.sub_request(request) if handler is not None else None
        if handler is None or (sub is None and op not in (pb.START_TLS, pb.GET_BOOKIE_INFO)):
            self.send_v3(v3.error_response(request, pb.EBADREQ))
            return
        handler(self, request)

    def _v3_version_ok(self, request: pb.Request, build: Callable[[int], pb.Response]) -> bool:
        if request.header.version != pb.VERSION_THREE:
            self.send_v3(build(pb.EBADVERSION))
            return False
        return True

    def _status_reply(
        self,
        request: pb.Request,
        op: str,
        build: Callable[[pb.Request, int], pb.Response],
        permit: tuple[InFlightGate, int] | None,
    ) -> Callable[[int], None]:
        """The answer of a request whose response carries a status only (``build(request, status)``): it gives
        ``permit`` back, sends the response and records its latency as ``op``, from now."""
        start = _now_ms()

        def reply(status: int) -> None:
            self._release(permit)
            self.send_v3(build(request, status))
            self.metrics.observe_request(op, _now_ms() - start, status == pb.EOK)

        return reply

    def _v3_add(self, request: pb.Request) -> None:
        add = request.addRequest
        permit = self._take_permit()
        reply = self._status_reply(request, "ADD_ENTRY", v3.add_response, permit)
        if not self._v3_version_ok(request, lambda s: v3.add_response(request, s)):
            self._release(permit)
            return
        try:
            scope_id, ledger_id, entry_id, lac = entry_header(add.body)
        except MalformedFrameError:
            reply(pb.EBADREQ)
            return
        if scope_id != v3.scope_id_of(add):
            reply(pb.EBADREQ)
            return
        try:
            self.bookie.add_entry_cb(
                scope_id,
                ledger_id,
                entry_id,
                lac,
                add.body,
                add.masterKey,
                lambda error: reply(pb.EOK if error is None else pb.EIO),
                recovery=add.HasField("flag") and add.flag == pb.AddRequest.RECOVERY_ADD,
                high_priority=request.header.priority > 0,
                deferred_sync=bool(add.writeFlags & v3.WRITE_FLAG_DEFERRED_SYNC),
            )
        except BookieError as exc:
            reply(status_for_error(exc))
            return
        self.metrics.add_bytes.inc(len(add.body))

    def _v3_read(self, request: pb.Request) -> None:
        read = request.readRequest
        permit = self._take_permit()
        if not self._v3_version_ok(request, lambda s: v3.read_response(request, s)):
            self._release(permit)
            return
        fencing = read.HasField("flag") and read.flag == pb.ReadRequest.FENCE_LEDGER
        if not fencing and read.HasField("previousLAC"):
            # Released when the task ends, however it ends (even cancelled before its first step).
            self.spawn(self._v3_long_poll(request)).add_done_callback(lambda _task: self._release(permit))
            return
        start = _now_ms()
        scope_id, ledger_id, entry_id = v3.scope_id_of(read), read.ledgerId, read.entryId
        op = "READ_ENTRY_FENCE_REQUEST" if fencing else "READ_ENTRY"

        def reply(resp: pb.Response) -> None:
            self._release(permit)
            self.send_v3(resp)
            self.metrics.observe_request(op, _now_ms() - start, resp.status == pb.EOK)

        fence = None
        try:
            if fencing:
                fence = self._start_fence(scope_id, ledger_id, read.masterKey if read.HasField("masterKey") else None)
            found = self.reads.read_entry_soon(scope_id, ledger_id, entry_id)
        except BookieError as exc:
            reply(v3.read_response(request, status_for_error(exc)))
            return

        def respond(data: bytes) -> None:
            self.metrics.read_bytes.inc(len(data))
            if fence is None:
                try:
                    max_lac = self.bookie.last_add_confirmed(scope_id, ledger_id)
                except BookieError as exc:  # deleted while a read thread had it
                    reply(v3.read_response(request, status_for_error(exc)))
                    return
                reply(v3.read_response(request, pb.EOK, body=data, max_lac=max_lac))
            else:
                self._on_durable(
                    fence,
                    lambda: reply(v3.read_response(request, pb.EOK, body=data)),
                    lambda e: reply(v3.read_response(request, pb.EIO)),
                )

        self._when_read(found, respond, lambda exc: reply(v3.read_response(request, status_for_error(exc))))

    async def _v3_long_poll(self, request: pb.Request) -> None:
        start = _now_ms()
        read = request.readRequest
        scope_id, ledger_id, entry_id = v3.scope_id_of(read), read.ledgerId, read.entryId
        previous = read.previousLAC
        updated_at: int | None = None
        try:
            if read.HasField("timeOut"):
                changed = await self.bookie.wait_for_lac(scope_id, ledger_id, previous, read.timeOut)
                if changed:
                    updated_at = int(time.time() * 1000)
            piggyback = read.HasField("flag") and read.flag == pb.ReadRequest.ENTRY_PIGGYBACK
            if piggyback:
                if entry_id != -1:
                    resp = v3.read_response(request, pb.EBADREQ)
                else:
                    known = self.bookie.last_add_confirmed(scope_id, ledger_id)
                    if known > previous:
                        try:
                            data = await self._read_entry(scope_id, ledger_id, previous + 1)
                            resp = v3.read_response(
                                request,
                                pb.EOK,
                                body=data,
                                entry_id=previous + 1,
                                max_lac=known,
                                lac_update_timestamp=updated_at,
                            )
                        except NoSuchEntryError:
                            resp = v3.read_response(request, pb.EOK, max_lac=known, lac_update_timestamp=updated_at)
                    else:
                        resp = v3.read_response(request, pb.EOK, max_lac=known)
            else:
                data = await self._read_entry(scope_id, ledger_id, entry_id)
                resp = v3.read_response(
                    request, pb.EOK, body=data, max_lac=self.bookie.last_add_confirmed(scope_id, ledger_id)
                )
        except BookieError as exc:
            resp = v3.read_response(request, status_for_error(exc))
        self.send_v3(resp)
        self.metrics.observe_request("READ_ENTRY_LONG_POLL_REQUEST", _now_ms() - start, resp.status == pb.EOK)

    def _v3_batch_read(self, request: pb.Request) -> None:
        start = _now_ms()
        batch = request.batchReadRequest
        permit = self._take_permit()

        def reply(resp: pb.Response) -> None:
            self._release(permit)
            self.send_v3(resp)
            self.metrics.observe_request("BATCH_READ_ENTRY", _now_ms() - start, resp.status == pb.EOK)
            if resp.status == pb.EOK:
                self.metrics.batch_read_response_size.observe(resp.ByteSize() + 4)

        if not self._v3_version_ok(request, lambda s: v3.batch_read_response(request, s)):
            self._release(permit)
            return
        scope_id, ledger_id = v3.scope_id_of(batch), batch.ledgerId
        fencing = batch.HasField("flag") and batch.flag == pb.BatchReadRequest.FENCE_LEDGER
        fence = None
        try:
            if fencing:
                fence = self._start_fence(scope_id, ledger_id, batch.masterKey if batch.HasField("masterKey") else None)
            found = self.reads.read_batch_soon(scope_id, ledger_id, batch.startEntryId, batch.maxCount, batch.maxSize)
        except BookieError as exc:
            reply(v3.batch_read_response(request, status_for_error(exc)))
            return

        def respond(entries: list[bytes]) -> None:
            try:
                max_lac = self.bookie.last_add_confirmed(scope_id, ledger_id)
            except BookieError as exc:  # deleted while a read thread had it
                reply(v3.batch_read_response(request, status_for_error(exc)))
                return
            if fence is None:
                reply(v3.batch_read_response(request, pb.EOK, entries=entries, max_lac=max_lac))
            else:
                self._on_durable(
                    fence,
                    lambda: reply(v3.batch_read_response(request, pb.EOK, entries=entries, max_lac=max_lac)),
                    lambda e: reply(v3.batch_read_response(request, pb.EIO)),
                )

        self._when_read(found, respond, lambda exc: reply(v3.batch_read_response(request, status_for_error(exc))))

    def _v3_answer_now(
        self, request: pb.Request, op: str, build: Callable[[int], pb.Response], answer: Callable[[], pb.Response]
    ) -> None:
        """A request answered at once, with no permit: EBADVERSION (``build``) for another protocol version, else
        ``answer()``, sent and timed as ``op``."""
        start = _now_ms()
        if not self._v3_version_ok(request, build):
            return
        resp = answer()
        self.send_v3(resp)
        self.metrics.observe_request(op, _now_ms() - start, resp.status == pb.EOK)

    def _v3_read_lac(self, request: pb.Request) -> None:
        build = partial(v3.read_lac_response, request)
        self._v3_answer_now(request, "READ_LAC", build, partial(self._read_lac_answer, request))

    def _read_lac_answer(self, request: pb.Request) -> pb.Response:
        sub = request.readLacRequest
        # ReadLacProcessorV3 (4.17): each missing half sets a status (no last entry is an
        # IOException there, so EIO), and "neither found" overrides everything with ENOENTRY
        # -- an unknown ledger included.
        try:
            result = self.bookie.read_lac(v3.scope_id_of(sub), sub.ledgerId)
        except BookieError:
            result = None
        if result is None or (result.explicit_lac is None and result.last_entry is None):
            return v3.read_lac_response(request, pb.ENOENTRY)
        status = pb.EOK if result.last_entry is not None else pb.EIO
        return v3.read_lac_response(request, status, lac_body=result.explicit_lac, last_entry_body=result.last_entry)

    def _v3_write_lac(self, request: pb.Request) -> None:
        sub = request.writeLacRequest
        if not self._v3_version_ok(request, partial(v3.write_lac_response, request)):
            return
        reply = self._status_reply(request, "WRITE_LAC", v3.write_lac_response, self._take_permit())
        try:
            scope_id, ledger_id, lac = lac_header(sub.body)
            fut = self.bookie.write_lac(scope_id, ledger_id, sub.body, sub.masterKey, lac)
        except MalformedFrameError:
            reply(pb.EBADREQ)
            return
        except BookieError as exc:
            reply(status_for_error(exc))
            return
        self._on_durable(fut, lambda: reply(pb.EOK), lambda e: reply(pb.EIO))

    def _v3_force_ledger(self, request: pb.Request) -> None:
        if not self._v3_version_ok(request, partial(v3.force_ledger_response, request)):
            return
        reply = self._status_reply(request, "FORCE_LEDGER", v3.force_ledger_response, self._take_permit())
        self._on_durable(self.bookie.force_ledger(), lambda: reply(pb.EOK), lambda e: reply(pb.EIO))

    def _v3_bookie_info(self, request: pb.Request) -> None:
        build = partial(v3.get_bookie_info_response, request)
        self._v3_answer_now(request, "GET_BOOKIE_INFO", build, partial(self._bookie_info_answer, request))

    def _bookie_info_answer(self, request: pb.Request) -> pb.Response:
        requested = request.getBookieInfoRequest.requested
        try:
            total, free = self.bookie.storage.disk_usage()
        except OSError:
            return v3.get_bookie_info_response(request, pb.EIO)
        return v3.get_bookie_info_response(
            request,
            pb.EOK,
            total_disk_capacity=total if requested & v3.TOTAL_DISK_CAPACITY else None,
            free_disk_space=free if requested & v3.FREE_DISK_SPACE else None,
        )

    def _v3_list_entries(self, request: pb.Request) -> None:
        build = partial(v3.get_list_of_entries_response, request)
        answer = partial(self._list_entries_answer, request)
        self._v3_answer_now(request, "GET_LIST_OF_ENTRIES_OF_LEDGER", build, answer)

    def _list_entries_answer(self, request: pb.Request) -> pb.Response:
        sub = request.getListOfEntriesOfLedgerRequest
        try:
            ids = self.bookie.entry_ids(v3.scope_id_of(sub), sub.ledgerId)
        except NoSuchLedgerError:
            return v3.get_list_of_entries_response(request, pb.ENOLEDGER)
        except BookieError:
            return v3.get_list_of_entries_response(request, pb.EIO)
        return v3.get_list_of_entries_response(request, pb.EOK, availability=v3.encode_availability(ids))

    def _v3_start_tls(self, request: pb.Request) -> None:
        # TLS is not configured on this bookie: BookieRequestProcessor answers EBADREQ.
        self.send_v3(v3.start_tls_response(request, pb.EBADREQ))

    def _v3_auth(self, request: pb.Request) -> None:
        self.send_v3(v3.auth_response(request, v2.AUTH_DISABLED_PLUGIN_NAME, b""))

    _V3_HANDLERS: dict[int, Callable[["V3Handlers", pb.Request], None]] = {
        pb.ADD_ENTRY: _v3_add,
        pb.READ_ENTRY: _v3_read,
        pb.READ_LAC: _v3_read_lac,
        pb.WRITE_LAC: _v3_write_lac,
        pb.FORCE_LEDGER: _v3_force_ledger,
        pb.GET_BOOKIE_INFO: _v3_bookie_info,
        pb.GET_LIST_OF_ENTRIES_OF_LEDGER: _v3_list_entries,
        pb.START_TLS: _v3_start_tls,
        pb.AUTH: _v3_auth,
        pb.BATCH_READ_ENTRY: _v3_batch_read,
    }

