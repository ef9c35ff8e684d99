"""The provider of a class, built from its spec (and, for DigitalOcean, the API token in its Secret)."""

from __future__ import annotations

import base64
import time

from tollgate.models.routedip import DigitalOceanSettings, Trust
from tollgate.routedip.k8s import Kube
from tollgate.routedip.providers import Provider, ProviderError
from tollgate.routedip.providers.digitalocean import DigitalOceanClient, DigitalOceanProvider
from tollgate.routedip.providers.job import JobProvider
from tollgate.routedip.providers.local import LocalProvider
from tollgate.routedip.state import ClassState
from tollgate.routedip.validation import DEFAULT_TRUST, trust_problems
from tollgate.runtime.kube import is_not_found

TOKEN_TTL = 30.0


class Providers:
    def __init__(
        self, kube: Kube, system_namespace: str, job_wait_timeout: float = 120.0, trust: Trust = DEFAULT_TRUST
    ) -> None:
        self.kube = kube
        self.system_namespace = system_namespace
        self.job_wait_timeout = job_wait_timeout
        self.trust = trust
        self._clients: dict[tuple[str, str], DigitalOceanClient] = {}
        self._tokens: dict[tuple[str, int], tuple[str, float]] = {}

    async def for_class(self, routed_ip_class: ClassState) -> Provider:
        spec = routed_ip_class.spec
        if spec is None:
            raise ProviderError(f"ClusterRoutedIPClass {routed_ip_class.name} has an invalid spec")
        # Checked here as well as in the class's acceptance: no path (a release among them) reaches a provider
        # of a class that asks more than it is trusted with.
        refused = trust_problems(spec, self.trust)
        if refused:
            raise ProviderError(
                f"ClusterRoutedIPClass {routed_ip_class.name}: " + "; ".join(m for _, m in refused),
                reason=refused[0][0],
            )
        if spec.provider == "local":
            return LocalProvider(self.kube, self.system_namespace)
        if spec.provider == "job":
            return JobProvider(
                self.kube,
                routed_ip_class,
                self.system_namespace,
                service_account=self.trust.job_service_account,
                wait_timeout=self.job_wait_timeout,
            )
        settings = spec.digitalocean or DigitalOceanSettings()
        token = await self._token(routed_ip_class, settings.token_key)
        client = self._clients.get((settings.api_url, token))
        if client is None:
            client = self._clients[(settings.api_url, token)] = DigitalOceanClient(settings.api_url, token)
        return DigitalOceanProvider(client, settings.firewall_id)

    async def _token(self, routed_ip_class: ClassState, key: str) -> str:
        cache_key = (routed_ip_class.uid, routed_ip_class.generation)
        cached = self._tokens.get(cache_key)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        assert routed_ip_class.spec is not None
        looked = []
        for ref in routed_ip_class.spec.from_secrets_ref:
            try:
                secret = await self.kube.read_secret(ref.namespace, ref.name)
            except Exception as error:
                if not is_not_found(error):
                    raise
                looked.append(f"{ref.namespace}/{ref.name} (not found)")
                continue
            value = (secret.get("data") or {}).get(key)
            if value:
                token = base64.b64decode(value).decode().strip()
                self._tokens[cache_key] = (token, time.monotonic() + TOKEN_TTL)
                return token
            looked.append(f"{ref.namespace}/{ref.name} (no key {key!r})")
        raise ProviderError(
            f"spec.fromSecretsRef: no Secret holds the DigitalOcean token under key {key!r}: {', '.join(looked)}",
            reason="MissingCredentials",
        )

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
