from __future__ import annotations

import math

import pytest
from _seeding import seeded_rng

from qualify.stats.power import independent_discordance, min_resolvable_drop, power_statement

Z95, Z80 = 1.6448536269514722, 0.8416212335729143  # z_{0.95}, z_{0.80} from a normal table


def test_hand_computed_gsm8k_example() -> None:
    # The GSM8K case: n = 200, reference 93 %, alpha 0.05, beta 0.2, independent errors.
    z = Z95 + Z80
    psi = 2 * 0.93 * 0.07
    expected = z * math.sqrt(psi / (200 + z * z))
    assert expected == pytest.approx(0.06248, abs=5e-5)
    assert min_resolvable_drop(200, 0.05, 0.2, 0.93) == pytest.approx(expected, rel=1e-9)
    statement = power_statement(200, 0.05, 0.2, 0.93, 0.99)
    # Three answers out of 200 (1.5 points) is far below 6.2 points, and the 99 % floor allows 0.93 points.
    assert statement.underpowered
    assert statement.allowed_drop == pytest.approx(0.0093)


def test_declared_discordance_is_used_as_is() -> None:
    z = Z95 + Z80
    assert min_resolvable_drop(14042, 0.05, 0.2, 0.7736, discordance=0.02) == pytest.approx(
        z * math.sqrt(0.02 / (14042 + z * z)), rel=1e-9
    )
    assert not power_statement(14042, 0.05, 0.2, 0.7736, 0.99, discordance=0.02).underpowered
    assert power_statement(14042, 0.05, 0.2, 0.7736, 0.999, discordance=0.02).underpowered


def test_drop_solves_the_defining_equation_on_random_inputs() -> None:
    rng = seeded_rng()
    nd = __import__("statistics").NormalDist()
    for _ in range(50):
        n = int(rng.integers(5, 50_000))
        alpha, beta = float(rng.uniform(0.001, 0.2)), float(rng.uniform(0.01, 0.5))
        p = float(rng.uniform(0.01, 0.99))
        delta = min_resolvable_drop(n, alpha, beta, p)
        z = nd.inv_cdf(1 - alpha) + nd.inv_cdf(1 - beta)
        psi = independent_discordance(p)
        assert delta == pytest.approx(z * math.sqrt((psi - delta**2) / n), rel=1e-9)
        assert min_resolvable_drop(4 * n, alpha, beta, p) < delta


def test_zero_reference_is_always_underpowered() -> None:
    statement = power_statement(1000, 0.05, 0.2, 0.0, 0.99)
    assert statement.underpowered
    assert "allows no drop" in statement.sentence()


@pytest.mark.parametrize("bad", [{"n": 0}, {"alpha": 0.0}, {"beta": 1.0}, {"reference_score": 1.5}])
def test_invalid_arguments_are_rejected(bad: dict[str, float]) -> None:
    args = {"n": 100, "alpha": 0.05, "beta": 0.2, "reference_score": 0.5} | bad
    with pytest.raises(ValueError):
        min_resolvable_drop(**args)  # type: ignore[arg-type]
