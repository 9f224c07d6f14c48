"""Airtime arithmetic of the NR numerology and the modelled link capacity."""

from __future__ import annotations

import math

import pytest

from radio.numerology import Numerology


def test_numerology_mu3_120khz():
    n = Numerology(120e3, 66)
    assert n.mu == 3
    assert n.slot_duration_s == pytest.approx(125e-6)
    assert n.ofdm_symbol_duration_s == pytest.approx(125e-6 / 14)
    assert n.num_subcarriers == 792
    assert n.bandwidth_hz == pytest.approx(95.04e6)
    # 792 subcarriers x 14 symbols per 0.125 ms slot
    assert n.symbol_rate_per_s == pytest.approx(792 * 14 / 125e-6)


def test_airtime_counts_whole_ofdm_symbols_or_slots():
    n = Numerology(120e3, 66)
    assert n.airtime_s(0) == 0.0
    # a few REs still occupy one whole OFDM symbol of the allocation
    assert n.airtime_s(8) == pytest.approx(n.ofdm_symbol_duration_s)
    assert n.airtime_s(792) == pytest.approx(n.ofdm_symbol_duration_s)
    assert n.airtime_s(793) == pytest.approx(2 * n.ofdm_symbol_duration_s)
    assert n.airtime_s(8, "slot") == pytest.approx(n.slot_duration_s)
    # one full slot of REs lasts one slot at both granularities
    assert n.airtime_s(792 * 14) == pytest.approx(n.slot_duration_s)
    assert n.airtime_s(792 * 14 + 1, "slot") == pytest.approx(2 * n.slot_duration_s)
    assert n.slots_needed(792 * 14) == 1
    assert n.slots_needed(792 * 14 + 1) == 2
    # 15 kHz, 1 RB: 12 subcarriers x 14 symbols per 1 ms
    assert Numerology(15e3, 1).airtime_s(168) == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="granularity"):
        n.airtime_s(1, "re")


def test_numerology_rejects_bad_values():
    with pytest.raises(ValueError, match="subcarrier_spacing_hz"):
        Numerology(100e3, 66)
    with pytest.raises(ValueError, match="num_resource_blocks"):
        Numerology(120e3, 0)
    with pytest.raises(ValueError, match="channel_uses"):
        Numerology().airtime_s(-1)


def test_radio_link_capacity_units_and_monotonic():
    from radio.link import radio_link_capacity

    lo = radio_link_capacity(1e6, 0.0, num_realisations=64)
    hi = radio_link_capacity(1e6, 20.0, num_realisations=64)
    assert lo.kind == "modelled"
    assert 0 < lo.capacity_mbps < hi.capacity_mbps
    # airtime [s]: the payload's REs in whole OFDM symbols, >= payload bits / rate
    n = Numerology(120e3, 66)
    assert hi.airtime_s == pytest.approx(n.airtime_s(hi.channel_uses))
    assert 0 <= hi.airtime_s - 8e6 / (hi.capacity_mbps * 1e6) < n.ofdm_symbol_duration_s
    # 4x4 at 20 dB: between a SISO and an ideal 4-stream Shannon bound
    assert math.log2(1 + 10 ** 1.7) < hi.spectral_efficiency_bps_per_hz < 4 * math.log2(1 + 100)
    assert set(hi.as_dict()) >= {"capacity_mbps", "airtime_s", "kind"}
    with pytest.raises(ValueError, match="payload_bytes"):
        radio_link_capacity(-1)
