"""The Tiltfile's kind mode, as Tilt itself evaluates it: `tilt alpha tiltfile-result -- --mode=kind` needs neither a
cluster nor Docker, and reports every image target (Dockerfile, build context, live update), every rendered
manifest and every port forward. These tests read that report, not the Tiltfile's text."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tollgate.testing import requirements
from tollgate.testing.tilt import tilt_binary, tiltfile_result
from tollgate.testing.tools import repo_root

ROOT = repo_root()
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "pyproject.toml").exists())
# The namespace of every release (tollgate-crds and tollgate-<service>); make deploy reads it too.
NAMESPACES: dict[str, str] = yaml.safe_load((ROOT / "deploy" / "charts" / "namespaces.yaml").read_text())
HEALTH_PORT = 8080
# The charts' user; the dev stage of every Dockerfile gives it the package directory.
CHART_USER = 10001
NAMESPACED_RBAC = {"Role", "RoleBinding", "ServiceAccount"}

Obj = dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def tilt() -> Path:
    """Tilt (make tools builds it from the offline source archive): skipped without it, failed in CI
    (tollgate.testing.requirements)."""
    return requirements.require_tool(tilt_binary, "Tilt kind-mode tests")


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> Obj:
    return tiltfile_result(tmp_path_factory.mktemp("tilt-kind"), "--mode=kind")


def manifests(result: Obj) -> dict[str, Obj]:
    return {m["Name"]: m for m in result["Manifests"]}


def objects(manifest: Obj) -> list[Obj]:
    deploy = manifest.get("DeployTarget") or {}
    return [doc for doc in yaml.safe_load_all(deploy.get("yaml", "")) if doc]


def all_objects(result: Obj) -> list[Obj]:
    return [obj for manifest in result["Manifests"] for obj in objects(manifest)]


def image_targets(result: Obj) -> list[Obj]:
    return [target for manifest in result["Manifests"] for target in manifest.get("ImageTargets") or []]


def dockerfile(service: str) -> str:
    return (ROOT / "services" / service / "Dockerfile").read_text()


def service_of(target: Obj) -> str:
    """The service whose services/<name>/Dockerfile Tilt read for this image target."""
    contents = target["BuildDetails"]["dockerfileContents"]
    owners = [service for service in SERVICES if dockerfile(service) == contents]
    assert len(owners) == 1, f"{target['selector']}: its Dockerfile is services/<name>/Dockerfile of {owners}"
    return owners[0]


def targets_by_service(result: Obj) -> dict[str, Obj]:
    found: dict[str, Obj] = {}
    for target in image_targets(result):
        service = service_of(target)
        assert service not in found, f"two image targets are built from services/{service}/Dockerfile"
        found[service] = target
    return found


def deployment(result: Obj, service: str) -> Obj:
    resource = manifests(result).get(f"tollgate-{service}")
    assert resource is not None, f"no Tilt resource tollgate-{service}"
    deployments = [obj for obj in objects(resource) if obj["kind"] == "Deployment"]
    assert len(deployments) == 1, f"tollgate-{service}: {len(deployments)} Deployments"
    return deployments[0]


def containers(deployment: Obj) -> list[Obj]:
    spec = deployment["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def image_name(ref: str) -> str:
    """An image reference without its tag or digest: what a docker_build ref without a tag matches."""
    name = ref.split("@", 1)[0]
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def named(objs: list[Obj], kind: str) -> set[tuple[str, str]]:
    """(namespace, name) of every object of one kind."""
    return {(obj["metadata"].get("namespace", ""), obj["metadata"]["name"]) for obj in objs if obj["kind"] == kind}


def release_of(obj: Obj) -> str | None:
    """The Helm release an object was rendered by: its instance label, else the CRD chart for CRDs, else the
    release named like the object (the webhook configurations)."""
    instance = (obj["metadata"].get("labels") or {}).get("app.kubernetes.io/instance")
    if instance:
        return str(instance)
    if obj["kind"] == "CustomResourceDefinition":
        return "tollgate-crds"
    name = obj["metadata"]["name"]
    return name if name in NAMESPACES else None


def dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as Tilt matches it (moby's patternmatcher): ** any depth, * and ? within a name."""
    regex, i = "", 0
    pattern = pattern.strip("/")
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex, i = regex + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            regex, i = regex + ".*", i + 2
        elif pattern[i] == "*":
            regex, i = regex + "[^/]*", i + 1
        elif pattern[i] == "?":
            regex, i = regex + "[^/]", i + 1
        else:
            regex, i = regex + re.escape(pattern[i]), i + 1
    return re.compile(regex + r"\Z")


def ignored(ignores: list[Obj], path: Path) -> bool:
    """Whether one of Tilt's IgnoreDefs leaves `path` out. A basePath without patterns drops itself and everything
    under it; otherwise the last pattern that matches the path or one of its parents (relative to basePath)
    decides, and a leading ! keeps."""
    for ignore in ignores:
        base = Path(ignore["basePath"])
        if not path.is_relative_to(base):
            continue
        patterns = ignore.get("patterns") or []
        if not patterns:
            return True
        parts = path.relative_to(base).parts
        candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        excluded = False
        for pattern in patterns:
            regex = dockerignore_regex(pattern.removeprefix("!"))
            if any(regex.match(candidate) for candidate in candidates):
                excluded = not pattern.startswith("!")
        if excluded:
            return True
    return False


def dev_stage(service: str) -> str:
    text = dockerfile(service)
    match = re.search(r"^FROM \S+ AS dev$(.*?)(?=^FROM |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"services/{service}/Dockerfile has no dev stage"
    return match.group(1)


def test_one_dev_image_per_service_built_from_its_dockerfile_with_only_what_it_copies(result: Obj) -> None:
    assert len(SERVICES) == 5, SERVICES
    targets = image_targets(result)
    assert len(targets) == len(SERVICES), [t["selector"] for t in targets]
    built = targets_by_service(result)
    assert sorted(built) == SERVICES
    docs = sorted(p for p in (ROOT / "docs").rglob("*") if p.is_file())
    assert docs, "no file under docs/"
    for service, target in built.items():
        details = target["BuildDetails"]
        assert details["target"] == "dev", f"{service}: built to stage {details['target']!r}"
        assert Path(details["context"]) == ROOT, f"{service}: context {details['context']}"
        package = ROOT / "services" / service / "src" / "tollgate" / service
        needed = [
            ROOT / "pyproject.toml",
            ROOT / "uv.lock",
            *sorted((ROOT / "libs").glob("*/pyproject.toml")),
            ROOT / "libs" / "models" / "src" / "tollgate" / "models" / "__init__.py",
            ROOT / "services" / service / "pyproject.toml",
            package / "__init__.py",
        ]
        others = [ROOT / "services" / other / "src" / "tollgate" / other / "__init__.py" for other in SERVICES]
        unneeded = [*docs, ROOT / "README.md", ROOT / "deploy" / "charts" / "namespaces.yaml"]
        unneeded += [path for path in others if not path.is_relative_to(package)]
        for path in needed + unneeded:
            assert path.exists(), path
        # contextIgnores: what `docker build` is sent; FileWatchIgnores: which edits rebuild the image.
        for field, ignores in (("context", details["contextIgnores"]), ("file watch", target["FileWatchIgnores"])):
            missing = [str(p.relative_to(ROOT)) for p in needed if ignored(ignores, p)]
            assert not missing, f"{service}: {field} lacks {missing}"
            extra = [str(p.relative_to(ROOT)) for p in unneeded if not ignored(ignores, p)]
            assert not extra, f"{service}: {field} holds {extra}"


def test_every_chart_renders_into_its_releases_namespace(result: Obj) -> None:
    everything = all_objects(result)
    namespaces = {obj["metadata"]["name"] for obj in everything if obj["kind"] == "Namespace"}
    assert set(NAMESPACES.values()) <= namespaces, f"Namespace objects: {sorted(namespaces)}"
    rendered: dict[str, list[Obj]] = {}
    for obj in everything:
        if obj["kind"] == "Namespace":
            continue
        release = release_of(obj)
        assert release in NAMESPACES, f"{obj['kind']} {obj['metadata']['name']}: from no known release"
        rendered.setdefault(release, []).append(obj)
    assert sorted(rendered) == sorted(NAMESPACES), "a chart rendered nothing"
    for release, objs in rendered.items():
        wrong = [
            f"{obj['kind']}/{obj['metadata']['name']} in {obj['metadata'].get('namespace')!r}"
            for obj in objs
            if obj["metadata"].get("namespace") != NAMESPACES[release]
        ]
        assert not wrong, f"{release} belongs in {NAMESPACES[release]}: {wrong}"
        rbac = [obj for obj in objs if obj["kind"] in NAMESPACED_RBAC]
        assert all(obj["metadata"]["namespace"] == NAMESPACES[release] for obj in rbac)
    assert {obj["metadata"].get("namespace") for obj in everything if obj["kind"] != "Namespace"} <= namespaces
    # References across objects name the release's namespace too: RBAC subjects, the pods' ServiceAccounts and
    # the webhook configurations' Service.
    accounts, services = named(everything, "ServiceAccount"), named(everything, "Service")
    assert accounts, "no ServiceAccount rendered"
    for obj in everything:
        release = release_of(obj)
        if obj["kind"] in {"RoleBinding", "ClusterRoleBinding"}:
            for subject in obj["subjects"]:
                if subject["kind"] == "ServiceAccount":
                    assert subject["namespace"] == NAMESPACES[str(release)], f"{obj['metadata']['name']}: {subject}"
                    assert (subject["namespace"], subject["name"]) in accounts, subject
        if obj["kind"] == "Deployment":
            account = obj["spec"]["template"]["spec"]["serviceAccountName"]
            assert (obj["metadata"]["namespace"], account) in accounts, f"{obj['metadata']['name']}: {account}"
        if obj["kind"] in {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}:
            for webhook in obj["webhooks"]:
                service = webhook["clientConfig"]["service"]
                assert (service["namespace"], service["name"]) in services, f"{webhook['name']}: {service}"


def test_port_forwards_are_the_ports_of_each_deployment_on_distinct_local_ports(result: Obj) -> None:
    local_ports: list[int] = []
    for manifest in result["Manifests"]:
        spec = (manifest.get("DeployTarget") or {}).get("portForwardTemplateSpec") or {}
        local_ports += [forward["localPort"] for forward in spec.get("forwards") or []]
    assert len(local_ports) == len(set(local_ports)), f"local ports used twice: {sorted(local_ports)}"
    for service in SERVICES:
        served = {
            port["containerPort"]: port.get("name")
            for container in containers(deployment(result, service))
            for port in container.get("ports", [])
        }
        values = yaml.safe_load((ROOT / "deploy" / "charts" / f"tollgate-{service}" / "values.yaml").read_text())
        debug = {values["debugApi"]["port"]} if service == "xds" else set()  # kind mode publishes xds' debug API
        assert set(served) == {HEALTH_PORT} | {p["port"] for p in values.get("ports", [])} | debug, (
            f"{service}: {served}"
        )
        spec = manifests(result)[f"tollgate-{service}"]["DeployTarget"].get("portForwardTemplateSpec") or {}
        forwards = spec.get("forwards") or []
        forwarded = [forward["containerPort"] for forward in forwards]
        assert sorted(forwarded) == sorted(served), f"tollgate-{service} forwards {forwarded}, serves {served}"
        assert {f["containerPort"]: f.get("name") for f in forwards} == served, f"{service}: names"


def test_live_update_syncs_into_the_directory_the_dev_image_gives_the_pods_user(result: Obj) -> None:
    for service, target in targets_by_service(result).items():
        stage = dev_stage(service)
        chowned = re.findall(r"chown -R (\d+):\d+ (\S+)", stage)
        writable = [PurePosixPath(path) for uid, path in chowned if int(uid) == CHART_USER]
        assert writable, f"services/{service}/Dockerfile: the dev stage chowns nothing to {CHART_USER}"
        entrypoint = json.loads(re.findall(r"^ENTRYPOINT (.*)$", stage, re.MULTILINE)[-1])
        watched = PurePosixPath(entrypoint[-1])
        assert entrypoint[0] == "watchfiles", f"{service}: the dev image runs {entrypoint}"
        spec = target["LiveUpdateSpec"]
        base = Path(spec["basePath"])
        syncs = spec.get("syncs") or []
        own = ROOT / "services" / service / "src" / "tollgate" / service
        assert own in {base / sync["localPath"] for sync in syncs}, f"{service}: its own package is not synced"
        for sync in syncs:
            local, container = base / sync["localPath"], PurePosixPath(sync["containerPath"])
            assert local.is_dir(), f"{service}: sync source {sync['localPath']} is not in the repository"
            assert local.name == container.name, f"{service}: {sync['localPath']} synced to {container}"
            assert any(container.is_relative_to(d) for d in writable), f"{service}: {container} not under {writable}"
            assert container.is_relative_to(watched), f"{service}: watchfiles ({watched}) misses {container}"
            # An edit under the sync source must reach Tilt's file watch, or the sync never runs.
            assert not ignored(target["FileWatchIgnores"], local / "__init__.py"), f"{service}: {local} unwatched"
        pod = deployment(result, service)["spec"]["template"]["spec"]
        [container] = [c for c in pod["containers"] if image_name(c["image"]) == target["selector"]]
        assert "command" not in container, f"{service}: the chart replaces the dev image's watchfiles entrypoint"
        context = container.get("securityContext") or {}
        user = context.get("runAsUser", (pod.get("securityContext") or {}).get("runAsUser"))
        assert user == CHART_USER, f"{service}: runs as {user}"
        assert context.get("readOnlyRootFilesystem", False) is False, f"{service}: read-only root filesystem"


def test_the_deployments_run_the_images_tilt_builds(result: Obj) -> None:
    refs = {target["selector"] for target in image_targets(result)}

    def deployed(objs: list[Obj]) -> set[str]:
        return {image_name(c["image"]) for obj in objs if obj["kind"] == "Deployment" for c in containers(obj)}

    assert deployed(all_objects(result)) == refs
    for service in SERVICES:
        manifest = manifests(result)[f"tollgate-{service}"]
        # Tilt attaches an image target to the resource whose YAML names it, and substitutes the built image.
        attached = {target["selector"] for target in manifest.get("ImageTargets") or []}
        assert attached == deployed(objects(manifest)), f"tollgate-{service}: builds {attached}"
        assert len(manifest["DeployTarget"].get("imageMaps") or []) == len(attached) == 1, service
        assert image_name(next(iter(attached))).rsplit("/", 1)[-1] == service
