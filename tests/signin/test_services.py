"""The rules of single sign-on without a provider: claims to usernames and memberships."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from signin import services
from signin.errors import SignInError
from signin.models import GroupMapping, Identity
from tenants.models import Membership, Tenant

pytestmark = pytest.mark.django_db

ISSUER = "https://login.example.com"


def claims(sub: str = "s-1", **more: object) -> dict[str, object]:
    return {"iss": ISSUER, "sub": sub, **more}


@pytest.mark.parametrize(
    ("raw", "groups"),
    [(["a", "b"], ["a", "b"]), ("a", ["a"]), (None, []), ({"a": 1}, []), ([1, {"x": 2}], ["1"])],
)
def test_the_groups_claim_is_read_as_a_list(raw: object, groups: list[str]) -> None:
    assert services.claims_groups(claims={"groups": raw}) == groups


def test_a_username_is_made_valid_and_unique(db: None) -> None:
    User.objects.create_user("li-wei")
    user = services.identity_sign_in(issuer=ISSUER, claims=claims(preferred_username="Li Wei"))
    assert user.username == "Li-Wei-2"  # "li-wei" is taken, whatever its case
    other = services.identity_sign_in(issuer=ISSUER, claims=claims("s-2", email="张伟@example.cn"))
    assert other.username == "张伟@example.cn"


def test_a_token_without_a_subject_signs_nobody_in(db: None) -> None:
    with pytest.raises(SignInError) as raised:
        services.identity_sign_in(issuer=ISSUER, claims={"iss": ISSUER})
    assert raised.value.kind == "invalid_token"


def test_the_highest_role_of_a_persons_groups_wins(tenant: Tenant) -> None:
    GroupMapping.objects.create(tenant=tenant, group="staff", role="member")
    GroupMapping.objects.create(tenant=tenant, group="leads", role="admin")
    user = services.identity_sign_in(issuer=ISSUER, claims=claims(groups=["leads", "staff"]))
    assert Membership.objects.get(user=user).role == "admin"
    identity = Identity.objects.get(user=user)
    changes = services.memberships_apply(identity=identity, groups=["staff"])
    assert changes.changed == ["acme:member"]
    assert Membership.objects.get(user=user).role == "member"


def test_staff_status_given_by_hand_is_not_taken_away(tenant: Tenant) -> None:
    GroupMapping.objects.create(tenant=tenant, group="leads", role="admin")
    user = services.identity_sign_in(issuer=ISSUER, claims=claims(groups=[]))
    User.objects.filter(pk=user.pk).update(is_staff=True)  # a superuser made them staff
    services.identity_sign_in(issuer=ISSUER, claims=claims(groups=["leads"]))
    services.identity_sign_in(issuer=ISSUER, claims=claims(groups=[]))
    user.refresh_from_db()
    assert user.is_staff
