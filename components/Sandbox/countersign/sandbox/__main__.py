"""``python -m countersign.sandbox mail|shop|visa``: one sandbox provider in the foreground (the
processes ``start_sandbox`` spawns; each logs its requests to stderr, which is its log file).
Radicale runs as ``python -m radicale``."""

from __future__ import annotations

import argparse
from pathlib import Path

from .http import JsonServer
from .mailbox import WHAT as MAIL
from .mailbox import SmtpSink, mailbox_route, serve_smtp
from .shop import WHAT as SHOP
from .shop import ShopSandbox
from .visa import WHAT as VISA
from .visa import VisaSandbox


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments and serve until the process is stopped (SIGTERM)."""
    parser = argparse.ArgumentParser(prog="python -m countersign.sandbox")
    sub = parser.add_subparsers(dest="service", required=True)
    mail = sub.add_parser("mail", help="SMTP server + mailbox page")
    mail.add_argument("--smtp-port", type=int, required=True)
    mail.add_argument("--http-port", type=int, required=True)
    mail.add_argument("--folder", type=Path, required=True)
    shop = sub.add_parser("shop", help="the sandbox shop")
    shop.add_argument("--port", type=int, required=True)
    visa = sub.add_parser("visa", help="the sandbox visa-appointment service")
    visa.add_argument("--port", type=int, required=True)
    visa.add_argument("--appear-after-s", type=float, default=30.0)
    visa.add_argument("--appear-after-searches", type=int, default=3)
    args = parser.parse_args(argv)
    host = "127.0.0.1"
    if args.service == "mail":
        sink = SmtpSink(host=host, port=args.smtp_port, folder=args.folder)
        with serve_smtp(sink):
            server = JsonServer(
                mailbox_route(sink), what=MAIL, host=host, port=args.http_port, quiet=False
            )
            print(f"sandbox mail: smtp {host}:{sink.port}, mailbox {server.url}", flush=True)
            server.serve_forever()
    elif args.service == "shop":
        state = ShopSandbox()
        server = JsonServer(state.route, what=SHOP, host=host, port=args.port, quiet=False)
        print(f"sandbox shop: {server.url}", flush=True)
        server.serve_forever()
    else:
        visa_state = VisaSandbox(
            appear_after_s=args.appear_after_s,
            appear_after_watch_searches=args.appear_after_searches,
            fixed_slot=False,
        )
        server = JsonServer(visa_state.route, what=VISA, host=host, port=args.port, quiet=False)
        print(f"sandbox visa: {server.url}", flush=True)
        try:
            server.serve_forever()
        finally:
            visa_state.release.set()


if __name__ == "__main__":
    main()
