"""Pins a job's image to the digest its tag names at submission (ECR DescribeImages), so a push
to `latest` while a job trains does not change the image its requeued runs pull.

Only Amazon ECR images are looked up (`<account>.dkr.ecr.<region>.amazonaws.com/<repository>`);
another registry's image (Docker Hub, nvcr.io, ghcr.io) runs as given, by tag, on every run:
name it by digest (`image@sha256:...`) to pin it. An ECR repository the control plane may not
describe (another account's, whose policy lets only the jobs' execution role pull) is left as
given too, with a warning in the logs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from spotline.aws.errors import error_code, is_throttling
from spotline.control.errors import ImageLookupUnavailable, ImageNotFound

logger = logging.getLogger(__name__)

_ECR_IMAGE = re.compile(
    r"^(?P<registry>(?P<account>[0-9]{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?)/"
    r"(?P<repository>[a-z0-9][a-z0-9._/-]*?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
# A repository's image without a tag is its `latest`, as Docker pulls it.
DEFAULT_TAG = "latest"
# What ECR answers for a repository or tag it does not have.
_NOT_FOUND = {"ImageNotFoundException", "RepositoryNotFoundException"}
# An answer that leaves the image as given (the control plane may not describe that repository).
_NOT_OURS = {"AccessDeniedException", "AccessDenied", "UnrecognizedClientException"}


def ecr_reference(image: str) -> dict[str, str] | None:
    """The parts of an ECR image reference (registry, account, region, repository, tag,
    digest), or None for another registry's."""
    matched = _ECR_IMAGE.match(image)
    if matched is None:
        return None
    return {k: v for k, v in matched.groupdict().items() if v is not None}


class EcrImageResolver:
    """`ImageResolver` over ECR: `client_for(region)` gives an ECR client of that region."""

    def __init__(self, client_for: Callable[[str], Any]) -> None:
        self._client_for = client_for

    def pin(self, image: str) -> str:
        parts = ecr_reference(image)
        if parts is None or "digest" in parts:
            return image
        tag = parts.get("tag", DEFAULT_TAG)
        try:
            response = self._client_for(parts["region"]).describe_images(
                registryId=parts["account"],
                repositoryName=parts["repository"],
                imageIds=[{"imageTag": tag}],
            )
        except ClientError as error:
            code = error_code(error)
            if code in _NOT_FOUND:
                raise ImageNotFound(
                    f"{image}: ECR has no image tagged {tag!r} in repository {parts['repository']!r} "
                    f"({code}); push it first, or name an image that exists"
                ) from error
            if code in _NOT_OURS:
                logger.warning(
                    "image not pinned: ECR refused DescribeImages", extra={"image": image, "code": code}
                )
                return image
            if is_throttling(error):
                raise ImageLookupUnavailable(f"ECR throttled the lookup of {image}") from error
            raise ImageLookupUnavailable(f"ECR could not describe {image}: {code}") from error
        except BotoCoreError as error:
            raise ImageLookupUnavailable(f"ECR could not be reached for {image}: {error}") from error
        details = response.get("imageDetails") or []
        if not details or not details[0].get("imageDigest"):
            raise ImageNotFound(
                f"{image}: ECR has no image tagged {tag!r} in repository {parts['repository']!r}"
            )
        return f"{parts['registry']}/{parts['repository']}@{details[0]['imageDigest']}"
