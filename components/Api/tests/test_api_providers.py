"""Pointing the service at real providers is configuration: the Policy file and the n8n
credentials it is given (``countersign.api.stack``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from countersign.api.stack import configured_credentials, load_policy
from countersign.kernel import InputError, Settings


def test_real_providers_are_settings_policy_file_and_n8n_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pointing Countersign at real providers is configuration: a Policy file naming them and
    the n8n credentials (made in the n8n editor) by type; a bad one is named."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("providers: {calendar: google.calendar, mail: gmail, chat: slack}\n")
    monkeypatch.setenv("COUNTERSIGN_POLICY_FILE", str(policy))
    monkeypatch.setenv(
        "COUNTERSIGN_N8N_CREDENTIALS",
        '{"googleCalendarOAuth2Api": {"id": "12", "name": "work google"}}',
    )
    settings = Settings()
    assert load_policy(settings.policy_file).providers["calendar"] == "google.calendar"
    refs = configured_credentials(settings)
    assert refs["googleCalendarOAuth2Api"].id == "12"
    assert load_policy(None).providers["calendar"] == "caldav"  # the sandbox by default
    policy.write_text("providers: {calendar: [oops]}\n")
    with pytest.raises(InputError, match="policy"):
        load_policy(policy)
