"""How the client reaches the API: the endpoint, the caller's identity, and one request.

`--endpoint local` (the default where `.spotline/local.json` exists) talks to the running local
control plane as one of its teams (the team's access-key header from local.json).
`--endpoint URL` (or SPOTLINE_ENDPOINT, or the `api_url` that `spotline configure` wrote) signs
each request with SigV4 for service `execute-api`, using botocore's signer and the standard AWS
credential chain (`--profile`, AWS_PROFILE, the environment, ~/.aws, instance roles).

Every failure here is a `ClientError`: one readable line and the exit code it deserves
(1 refused or failed, 2 usage error), never a traceback.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

LOCAL = "local"
ENV_ENDPOINT = "SPOTLINE_ENDPOINT"
ENV_TEAM = "SPOTLINE_TEAM"
ENV_STATE_DIR = "SPOTLINE_STATE_DIR"
SERVICE = "execute-api"
EXIT_FAILED = 1
EXIT_USAGE = 2
_REGION_IN_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com")


class ClientError(Exception):
    """A failure the client reports as one line, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED, status: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.status = status
        self.detail: list[dict[str, Any]] = []


def config_path() -> Path:
    """~/.config/spotline/config.toml (XDG_CONFIG_HOME respected)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "spotline" / "config.toml"


def read_config(path: Path | None = None) -> dict[str, Any]:
    path = path or config_path()
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ClientError(f"{path}: not valid TOML ({error})", EXIT_USAGE) from error


def write_config(values: Mapping[str, str], path: Path | None = None) -> Path:
    """Write string settings as TOML (`key = "value"` lines), keeping the other keys there."""
    path = path or config_path()
    current = {k: v for k, v in read_config(path).items() if isinstance(v, str)}
    current.update({k: v for k, v in values.items() if v})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{key} = {json.dumps(value)}\n" for key, value in sorted(current.items())))
    return path


def state_dir() -> Path:
    return Path(os.environ.get(ENV_STATE_DIR) or ".spotline")


@dataclass
class Endpoint:
    """Where requests go and how they are authenticated (local headers or SigV4)."""

    base_url: str
    kind: str  # "local" | "aws"
    team: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    credentials: Any = None  # botocore Credentials, for SigV4
    region: str | None = None
    timeout_s: float = 30.0

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Send one request; the decoded JSON body of a 2xx answer, else a `ClientError`."""
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        url = self.base_url.rstrip("/") + path
        if query:
            url += "?" + urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        sent: dict[str, str] = {"accept": "application/json", **self.headers, **(headers or {})}
        if data is not None:
            sent["content-type"] = "application/json"
        if self.credentials is not None:
            sent = self._signed(method, url, data, sent)
        try:
            status, content = send(method, url, data, sent, self.timeout_s)
        except (OSError, ValueError) as error:  # refused, unreachable, timed out, a bad URL
            why = getattr(error, "reason", None) or error
            raise ClientError(f"cannot reach the Spotline API at {self.base_url}: {why}") from error
        text = content.decode("utf-8", "replace")
        try:
            decoded = json.loads(text) if content else None
        except ValueError:
            decoded = None
        if status >= 400:
            raise _api_error(status, decoded, text)
        return decoded

    def _signed(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, data=data or b"", headers=headers)
        SigV4Auth(self.credentials, SERVICE, self.region or "us-east-1").add_auth(request)
        return dict(request.headers.items())


def send(
    method: str, url: str, data: bytes | None, headers: Mapping[str, str], timeout_s: float
) -> tuple[int, bytes]:
    """One HTTP exchange: (status, body), an error status included. The standard library's
    client: the CLI starts faster without an HTTP package to import."""
    request = urllib.request.Request(url, data=data, headers=dict(headers), method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return int(error.code), bytes(error.read())


def _api_error(status: int, body: Any, text: str) -> ClientError:
    message = ""
    detail: list[dict[str, Any]] = []
    if isinstance(body, dict):
        message = str(body.get("message") or body.get("Message") or "")
        if isinstance(body.get("detail"), list):
            detail = [d for d in body["detail"] if isinstance(d, dict)]
    message = message or text.strip()[:300] or "no message"
    if status == 403 and "signature" in message.lower():
        message += " (check the AWS credentials and the endpoint's region)"
    error = ClientError(f"refused ({status}): {message}", EXIT_FAILED, status)
    error.detail = detail
    return error


def resolve(
    endpoint: str | None,
    *,
    team: str | None = None,
    profile: str | None = None,
    region: str | None = None,
) -> Endpoint:
    """The endpoint the options, the environment and the config file name (in that order)."""
    config = read_config()
    chosen = endpoint or os.environ.get(ENV_ENDPOINT)
    local_json = state_dir() / "local.json"
    if not chosen:
        if local_json.exists():
            chosen = LOCAL
        elif isinstance(config.get("api_url"), str):
            chosen = config["api_url"]
        else:
            raise ClientError(
                "no endpoint: run `spotline local up` (writes .spotline/local.json), give --endpoint URL"
                " or SPOTLINE_ENDPOINT, or run `spotline configure`",
                EXIT_USAGE,
            )
    assert chosen is not None
    if chosen == LOCAL:
        return _local(local_json, team or os.environ.get(ENV_TEAM))
    if not chosen.startswith(("http://", "https://")):
        raise ClientError(f"--endpoint: expected `local` or an http(s) URL, got {chosen!r}", EXIT_USAGE)
    return _aws(
        chosen,
        profile=profile or _str(config.get("profile")),
        region=region or _str(config.get("region")),
    )


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _local(local_json: Path, team: str | None) -> Endpoint:
    if not local_json.exists():
        raise ClientError(f"--endpoint local: {local_json} not found; start it with `spotline local up`")
    try:
        info = json.loads(local_json.read_text())
        teams: dict[str, Any] = info["teams"]
        api_url = str(info["api_url"])
    except (ValueError, KeyError, TypeError) as error:
        raise ClientError(f"{local_json}: not a local.json written by `spotline local up`") from error
    if not teams:
        raise ClientError(f"{local_json}: lists no team")
    name = team or next(iter(teams))  # the first team local.json lists
    if name not in teams:
        raise ClientError(
            f"--team: {name!r} is not a local team (known: {', '.join(sorted(teams))})", EXIT_USAGE
        )
    headers = {str(k): str(v) for k, v in (teams[name].get("headers") or {}).items()}
    return Endpoint(base_url=api_url, kind=LOCAL, team=name, headers=headers)


def _aws(url: str, *, profile: str | None, region: str | None) -> Endpoint:
    import botocore.exceptions
    import botocore.session

    try:
        session = botocore.session.Session(profile=profile)
        credentials = session.get_credentials()
        found_region = region or session.get_config_variable("region")
    except botocore.exceptions.ProfileNotFound as error:
        raise ClientError(f"--profile: {error}", EXIT_USAGE) from error
    except botocore.exceptions.BotoCoreError as error:
        raise ClientError(f"AWS credentials: {error}") from error
    if credentials is None:
        raise ClientError(
            "no AWS credentials found to sign requests to "
            f"{url}: set AWS_PROFILE or --profile, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
        )
    match = _REGION_IN_HOST.search(url)
    if match:
        found_region = match.group(1)
    return Endpoint(
        base_url=url, kind="aws", credentials=credentials.get_frozen_credentials(), region=found_region
    )
