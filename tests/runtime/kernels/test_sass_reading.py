"""compile_sm90.split_sum: the split-K sum's loads in flight, read from SASS text (no compile, no GPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")
from tests.runtime.kernels.compile_sm90 import split_sum  # noqa: E402  # the SASS helpers of the sm_90 scripts

SASS = """
        /*0100*/                   HGMMA.64x16x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*0110*/                   FADD R1, R2, R3 ;
        /*0200*/                   ATOMG.E.ADD.STRONG.GPU PT, R4, desc[UR4][R2.64], R5 ;
        /*0210*/              @!P0 EXIT ;
        /*0220*/                   LDG.E.128.STRONG.GPU R8, desc[UR4][R6.64] ;
        /*0230*/                   LDG.E.128.STRONG.GPU R12, desc[UR4][R6.64+0x10] ;
        /*0240*/                   IADD3 R6, R6, 0x20, RZ ;
        /*0250*/                   FADD R20, R20, R8 ;
        /*0260*/                   LDG.E.128.STRONG.GPU R8, desc[UR4][R6.64] ;
        /*0270*/                   FADD R21, R21, R9 ;
        /*0280*/                   STG.E.U16 desc[UR4][R2.64], R20 ;
        /*0290*/                   EXIT ;
        /*02a0*/                   NOP;
"""


def test_the_sum_after_the_split_counter_and_its_loads_in_flight():
    assert split_sum(SASS) == {"instructions": 10, "loads": 3, "loads_in_flight": 2}


def test_a_kernel_without_split_k_has_no_sum():
    assert split_sum(SASS.replace("ATOMG", "RED")) == {"instructions": 0, "loads": 0, "loads_in_flight": 0}
