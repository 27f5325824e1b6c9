"""The compile report's SASS counts (``benchmarks.fused_kernel.parse_sass``) on a listing written by hand
in nvdisasm's format: loops found by their back edges, nested loops counted in the outer one, the idle
branch after the last EXIT no loop, NOP not counted, instructions sorted by class."""

from benchmarks.fused_kernel import parse_sass

LISTING = """
        .text.kernel:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   S2R R2, SR_TID.X ;
.L_x_0:
        /*0020*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;
        /*0030*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], RZ, !UPT ;
        /*0040*/                   MUFU.EX2 R5, R6 ;
.L_x_1:
        /*0050*/                   SHFL.BFLY PT, R7, R8, 0x1, 0x1f ;
        /*0060*/              @!P0 BRA `(.L_x_1) ;
        /*0070*/                   LDS.128 R8, [R9] ;
        /*0080*/                   STS [R9], R8 ;
        /*0090*/               @P1 REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R10.64], R11 ;
        /*00a0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00b0*/               @P2 BRA `(.L_x_0) ;
        /*00c0*/                   BRA `(.L_x_2) ;
.L_x_3:
        /*00d0*/                   HMMA.16816.F32.BF16 R12, R16, R20, R12 ;
        /*00e0*/                   MUFU.RCP R5, R6 ;
        /*00f0*/              @!UP0 BRA `(.L_x_3) ;
.L_x_2:
        /*0100*/                   EXIT ;
.L_x_4:
        /*0110*/                   BRA `(.L_x_4);
        /*0120*/                   NOP;
"""


def test_sass_loops_are_found_by_back_edges_with_nested_loops_counted_in_the_outer_one():
    counts = parse_sass(LISTING, scores_per_thread=2.0)
    assert counts["instructions"] == 18  # every instruction but the NOP
    outer, second = counts["loops"]
    # .L_x_0 .. the branch at 0x00b0: 10 instructions, the inner SHFL loop among them
    assert outer["instructions"] == 10 and outer["inner_loops"] == 1
    assert (outer["mufu"], outer["shuffle"], outer["shared"], outer["atomics"], outer["mma"], outer["global"],
            outer["barriers"]) == (1, 1, 2, 1, 1, 1, 1)
    assert outer["per_score"] == 5.0  # 10 instructions per thread over 2 scores per thread
    # a loop with Ampere's tensor-core instruction and a uniform predicate on its branch
    assert second["instructions"] == 3 and second["mma"] == 1 and second["mufu"] == 1 and second["inner_loops"] == 0
    # totals over the whole kernel
    assert counts["mufu"] == 2 and counts["mma"] == 2 and counts["atomics"] == 1


def test_a_kernel_without_back_edges_has_no_loops():
    straight = "\n".join(line for line in LISTING.splitlines() if "BRA" not in line)
    counts = parse_sass(straight, 1.0)
    assert counts["loops"] == [] and counts["instructions"] == 13
