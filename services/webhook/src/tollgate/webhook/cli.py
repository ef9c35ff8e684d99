"""`python -m tollgate.webhook.cli`: development certificates and the webhook configurations.

    python -m tollgate.webhook.cli certs --dir .dev/webhook --host 127.0.0.1 --host localhost
    python -m tollgate.webhook.cli configurations --url https://127.0.0.1:9443 --ca-file .dev/webhook/ca.crt \\
        | kubectl apply -f -
    python -m tollgate.webhook.cli configurations --service tollgate-system/tollgate-webhook:443 --ca-file ca.crt
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from tollgate.webhook.certs import CA_FILE, ensure, generate
from tollgate.webhook.registration import DEFAULT_NAME, Registration, ServiceReference


def _service(text: str) -> ServiceReference:
    """`namespace/name[:port]`."""
    reference, _, port = text.partition(":")
    namespace, slash, name = reference.partition("/")
    if not slash or not namespace or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected namespace/name[:port]")
    return ServiceReference(namespace, name, int(port) if port else 443)


def _labels(text: str) -> dict[str, str]:
    """`key=value,key=value`."""
    labels = {}
    for pair in filter(None, text.split(",")):
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise argparse.ArgumentTypeError(f"{pair!r}: expected key=value")
        labels[key] = value
    return labels


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(
        prog="python -m tollgate.webhook.cli", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = main.add_subparsers(dest="command", required=True)
    certs = commands.add_parser("certs", help="write a CA and a serving certificate (ca.crt, tls.crt, tls.key)")
    certs.add_argument("--dir", type=Path, required=True, help="where to write them")
    certs.add_argument("--host", action="append", required=True, help="DNS name or IP address (repeatable)")
    certs.add_argument("--force", action="store_true", help="replace an existing pair")
    configurations = commands.add_parser("configurations", help="print both webhook configurations as YAML")
    where = configurations.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of the webhook, e.g. https://127.0.0.1:9443")
    where.add_argument("--service", type=_service, help="namespace/name[:port] of the webhook's Service")
    configurations.add_argument("--ca-file", type=Path, required=True, help=f"the CA certificate ({CA_FILE})")
    configurations.add_argument("--name", default=DEFAULT_NAME, help="name of both configurations")
    configurations.add_argument("--object-selector", type=_labels, default={}, help="only objects with these labels")
    configurations.add_argument(
        "--namespace-selector", type=_labels, default={}, help="only objects in namespaces with these labels"
    )
    return main


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "certs":
        if args.force:
            generate(args.host).write(args.dir)
        else:
            ensure(args.dir, args.host)
        print(f"{args.dir}: {CA_FILE}, tls.crt, tls.key")
        return 0
    registration = Registration(
        ca_bundle=args.ca_file.read_bytes(),
        url=args.url,
        service=args.service,
        name=args.name,
        object_selector={"matchLabels": args.object_selector} if args.object_selector else {},
        namespace_selector={"matchLabels": args.namespace_selector} if args.namespace_selector else {},
    )
    yaml.safe_dump_all(registration.configurations(), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
