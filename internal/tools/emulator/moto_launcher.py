"""Run moto's server for sfnlimit's local stack.

Written to a temporary directory and run by internal/tools/emulator. It differs from `moto_server` in these ways:

1. Step Functions executes state machines (stepfunctions.execute_state_machine = true).
2. moto issue 10077 is worked around: in moto 5.2.1 every StartExecution after the first fails with
   "TypeError: cannot pickle '_thread.RLock' object", because StepFunctionsParserBackend.start_execution
   deep-copies the state machine, and the copy walks the live executions (threads, locks) and the backend.
   The state machine classes get a __deepcopy__ that shares the backend and leaves live executions out,
   which is what the upstream fix (moto PR 10093) does.
3. The interpreter's service calls (Lambda invoke, SQS, DynamoDB tasks) go to
   http://localhost:$MOTO_PORT (moto.settings.moto_server_port, read at each call). --interpreter-port sets
   MOTO_PORT independently of the port served, so that a gateway can sit in front of moto.
4. DynamoDB requests are served one at a time. moto serves each request on its own thread and checks a
   condition (attribute_not_exists, version = :v, a transaction's conditions) apart from the write it
   guards, so two racing conditional writes can both succeed; DynamoDB never lets them. Serialising
   DynamoDB's requests makes every conditional write and transaction atomic, as on AWS.

5. Per-request work that makes moto CPU-bound at a few dozen calls a second is done once instead
   (patch_hot_paths): the demo's handover between jobs went from about 1 s to about 0.35 s.
6. FIFO groups stay blocked under concurrent long polls, and a long poll waits instead of spinning
   (patch_sqs_receive), so the local event source mappings long-poll moto as Lambda's do SQS.

It serves on an inherited listening socket (--fd) or on --host/--port, and answers GET /_sfnlimit/health
with what it set up, so that the caller can check it.
"""

import argparse
import copy
import json
import os
import signal
import sys
import threading

EXPECTED_MOTO_VERSION = "5.2.1"
HEALTH_PATH = "/_sfnlimit/health"


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--fd", type=int, default=None, help="inherited listening socket")
    parser.add_argument(
        "--interpreter-port",
        default="",
        help="port on localhost that the Step Functions interpreter calls (default: the served port)",
    )
    parser.add_argument("--quiet", action="store_true", help="do not log each request")
    return parser.parse_args(argv)


def enable_execution():
    from moto.core.config import default_user_config

    sfn = dict(default_user_config.get("stepfunctions") or {})
    sfn["execute_state_machine"] = True
    default_user_config["stepfunctions"] = sfn


def patch_state_machine_deepcopy():
    """Work around moto issue 10077 (fixed upstream by PR 10093, not in 5.2.1)."""
    from moto.stepfunctions.models import StateMachineInstance

    if getattr(StateMachineInstance, "_sfnlimit_deepcopy", False):
        return

    def __deepcopy__(self, memo):
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            if key == "backend":
                # The backend holds every state machine and its executions: share it, never copy it.
                setattr(clone, key, value)
            elif key == "executions":
                # Live executions hold threads and locks; the clone is a snapshot of the definition
                # for one new execution and needs none of them.
                setattr(clone, key, [])
            else:
                setattr(clone, key, copy.deepcopy(value, memo))
        return clone

    # StateMachine and StateMachineVersion both derive from StateMachineInstance.
    StateMachineInstance.__deepcopy__ = __deepcopy__
    StateMachineInstance._sfnlimit_deepcopy = True


def patch_hot_paths():
    """Take two per-request costs out of moto 5.2.1 that make it CPU-bound under a few dozen calls a second.

    - The server's dispatcher looks each request's host up in backends.list_of_moto_modules(), which
      lists moto's package directory and stats every entry, under the dispatcher's global lock.
      The directory does not change while the server runs: list it once.
    - The Step Functions interpreter parses every JSONPath (InputPath, a Choice's Variable, a
      Parameters value, SecondsPath, ResultPath) with jsonpath_ng.parse at every evaluation, and each
      parse builds a new PLY parser (LALR tables, source inspection). A parsed path is immutable:
      parse each distinct path once.
    - The interpreter creates a new boto3 client (service model load, SSL context, connection pool) for
      every Lambda task it runs. Clients are thread-safe and their settings here are fixed: create one
      per region, service and port.
    - SQS's ReceiveMessage checks each candidate message's retention period by building every queue
      attribute (which counts the queue's messages three times), so a receive costs the square of the
      queue's depth. Read the one attribute it needs.
    None of them changes what moto answers; they only remove repeated work.
    """
    import functools

    from moto import backends
    from moto.core.utils import unix_time
    from moto.sqs.models import SQSBackend
    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.utils import boto_client, json_path
    from moto.settings import moto_server_port

    if getattr(backends, "_sfnlimit_patched", False):
        return
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    json_path.parse = functools.lru_cache(maxsize=4096)(json_path.parse)
    result_path.parse = functools.lru_cache(maxsize=4096)(result_path.parse)

    new_client = boto_client.boto_client_for
    clients = {}
    clients_lock = threading.Lock()

    def boto_client_for(region, service, state_credentials=None):
        key = (region, service, moto_server_port())
        with clients_lock:
            if key not in clients:
                clients[key] = new_client(region, service, state_credentials)
            return clients[key]

    boto_client.boto_client_for = boto_client_for
    lambda_eval_utils.boto_client_for = boto_client_for

    def is_message_valid_based_on_retention_period(self, queue_name, message):
        retention = int(self.get_queue(queue_name).message_retention_period)
        return retention + message.sent_timestamp / 1000 > unix_time()

    SQSBackend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period
    backends._sfnlimit_patched = True


def patch_sqs_receive():
    """Make moto 5.2.1's ReceiveMessage keep FIFO groups blocked under concurrent long polls.

    moto reads which groups have a message in flight once, when a receive starts, and checks a
    message's group apart from marking it received, with no lock: two receives at once (or a long
    poll that waits while another receive takes a message) can hand out two messages of one group,
    which SQS never does. A long poll also spins without pause while every visible message is behind
    a group in flight. Here each queue's receives run one scan at a time, each scan a short receive
    that reads the groups afresh, and changes to the queue (send, delete, visibility) run between scans, and a long poll waits between scans until the queue changes (a
    send, delete or visibility change) or 250 ms pass (a visibility timeout or delay ending), up to
    its WaitTimeSeconds. What moto answers is otherwise the same.
    """
    import time

    from moto.sqs.models import SQSBackend

    if getattr(SQSBackend, "_sfnlimit_receive", False):
        return
    conds_lock = threading.Lock()

    def cond_for(queue):
        with conds_lock:
            c = getattr(queue, "_sfnlimit_cond", None)
            if c is None:
                c = threading.Condition()
                queue._sfnlimit_cond = c
            return c

    receive = SQSBackend.receive_message

    def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
        c = cond_for(self.get_queue(queue_name))
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        with c:
            while True:
                result = receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
                remaining = deadline - time.monotonic()
                if result or remaining <= 0:
                    return result
                c.wait(timeout=min(remaining, 0.25))

    def notifying(name):
        change = getattr(SQSBackend, name)

        def wrapper(self, queue_name, *args, **kwargs):
            queue = self.queues.get(queue_name)
            if queue is None:
                return change(self, queue_name, *args, **kwargs)  # moto answers QueueDoesNotExist
            c = cond_for(queue)
            # Under the queue's lock: a change must not alter the messages in flight while a
            # receive scans them. One waiting receive then takes what the change made deliverable
            # (up to its batch size); waking them all would have each scan the queue for nothing.
            with c:
                try:
                    return change(self, queue_name, *args, **kwargs)
                finally:
                    c.notify()

        setattr(SQSBackend, name, wrapper)

    SQSBackend.receive_message = receive_message

    # A FIFO message's receipt handle expires when the message is received again: SQS answers
    # ChangeMessageVisibility with an earlier handle "The receipt handle has expired". moto takes any
    # handle the message ever had, so a late visibility change (a second release of one attempt)
    # made a message visible again while its next delivery held it.
    from moto.sqs.exceptions import ReceiptHandleIsInvalid

    change_visibility = SQSBackend.change_message_visibility

    def change_message_visibility(self, queue_name, receipt_handle, visibility_timeout):
        queue = self.get_queue(queue_name)
        if queue.fifo_queue:
            for message in queue._messages:
                if message.had_receipt_handle(receipt_handle) and message.receipt_handle != receipt_handle:
                    raise ReceiptHandleIsInvalid()
        return change_visibility(self, queue_name, receipt_handle, visibility_timeout)

    SQSBackend.change_message_visibility = change_message_visibility
    for name in ("send_message", "send_message_batch", "delete_message", "change_message_visibility", "purge_queue"):
        notifying(name)
    SQSBackend._sfnlimit_receive = True


def health_app(app, info):
    body = json.dumps(info).encode("utf-8")

    def wrapped(environ, start_response):
        if environ.get("PATH_INFO") == HEALTH_PATH and environ.get("REQUEST_METHOD") == "GET":
            start_response(
                "200 OK",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            # Consume the whole response under the lock: the write happens while it is built.
            with DYNAMODB_LOCK:
                return list(app(environ, start_response))
        return app(environ, start_response)

    return wrapped


DYNAMODB_LOCK = threading.Lock()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)

    import moto
    from moto.core.config import default_user_config
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import WSGIRequestHandler, make_server

    if moto.__version__ != EXPECTED_MOTO_VERSION:
        print(
            f"sfnlimit moto launcher: expected moto {EXPECTED_MOTO_VERSION}, found {moto.__version__}",
            file=sys.stderr,
        )

    enable_execution()
    patch_state_machine_deepcopy()
    patch_hot_paths()
    patch_sqs_receive()

    handler = WSGIRequestHandler
    if args.quiet:

        class QuietHandler(WSGIRequestHandler):
            def log_request(self, *a, **kw):
                pass

        handler = QuietHandler

    app = DomainDispatcherApplication(create_backend_app)
    server = make_server(
        args.host, args.port, None, threaded=True, request_handler=handler, fd=args.fd
    )
    port = server.server_address[1]
    interpreter_port = args.interpreter_port or str(port)
    # moto.settings.moto_server_port() reads MOTO_PORT at every call.
    os.environ["MOTO_PORT"] = interpreter_port

    from moto import settings

    info = {
        "moto": moto.__version__,
        "port": port,
        "interpreter_port": settings.moto_server_port(),
        "execute_state_machine": bool(
            default_user_config.get("stepfunctions", {}).get("execute_state_machine")
        ),
        "deepcopy_patched": True,
        "hot_paths_patched": True,
        "sqs_receive_patched": True,
        "pid": os.getpid(),
    }
    server.app = health_app(app, info)

    def stop(signum, frame):
        # Executions run in non-daemon threads that would hold a normal exit; the emulator's state is
        # in memory only, so leave at once.
        sys.stderr.flush()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"sfnlimit moto launcher: serving on {args.host}:{port}, interpreter calls localhost:{interpreter_port}",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
