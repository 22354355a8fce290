"""pimsim-nn's chip configuration derived from a Raptor target, its NoC table, and the
closed-form times of the instructions the exporter emits.

The chip files say what the target says, so that pimsim-nn judges the program on the same
machine Raptor scheduled it for:

* clock, crossbars per core and their size, weight and activation precision;
* the matrix unit's DAC/ADC pipeline chosen so that pimsim-nn's MVM compute time equals the
  target's `mvm_cycles` (front stage F, back stage B, `input_bits` passes: F + B +
  (input_bits - 1) * B = mvm_cycles with F <= B);
* vector unit width and latency (`vector_lanes`, `vector_op_cycles`), local memory
  (`local_memory_bytes`, `local_bytes_per_cycle`), global memory (`shared_memory_bytes`,
  `shared_access_bytes`, read and write cycles);
* NoC: `bus_width` = `flit_bytes` and, for every ordered pair of cores, the latency of one
  flit under the target's mesh model (hops * hop_cycles + flit_cycles). pimsim-nn charges a
  message of n bytes ceil(n / bus_width) times that (flits are not pipelined). Core <->
  global-memory pairs are 0: the target prices shared memory by its access cycles alone.

The closed forms below are pimsim-nn's own formulas (read from its source at commit f7446df)
plus the pipeline constants of its in-order core with a one-entry reorder buffer, measured
on micro-programs: the first instruction after `setbw` starts at cycle 3, every scalar
instruction takes one cycle, a vector/transfer instruction is followed by a 2-cycle gap
and an MVM by a 3-cycle gap; a transfer instruction whose last memory wait is a single
cycle (a 1-cycle local read in `send`, a 1-cycle local write in `ld`/`lldi`) and every `st`
take one cycle more (SystemC event ordering at the clock edge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from raptor import noc
from raptor.passes.memory import activation_bytes, mvm_row_elements
from raptor.target import Target

GLOBAL_MEMORY = -10
"""pimsim-nn's switch id of the global memory."""
START_CYCLES = 3
SCALAR_CYCLES = noc.PIMSIM_SCALAR_CYCLES
GAP_CYCLES = noc.PIMSIM_GAP_CYCLES
MVM_GAP_CYCLES = 3
ROB_MVM_GAP_CYCLES = 1
"""With a reorder buffer of more than one entry, cycles from an `mvmul`'s end to the next
`mvmul` on its group, or an instruction that waited for it (measured on ChipTest f7446df:
a group's `mvmul`s 1,324 cycles apart, one more than the busy time)."""
ROB_UNIT_CYCLES = 1
"""With a reorder buffer of more than one entry, cycles a vector or transfer instruction
holds its unit beyond its busy time: the next instruction on that unit is dispatched in the
cycle it ends (retires), one that waits for its bytes or its reorder-buffer entry a cycle
later (its `GAP_CYCLES`). Measured on ChipTest f7446df at `rob_size` 4 (lenet): an `lmv` of
5 bytes (2 busy cycles) every 3 cycles, back to back 3,278 times; 324 vector instructions
one cycle after the one whose output they read."""


class ChipError(ValueError):
    """A target that pimsim-nn's configuration cannot express."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class PimsimChip:
    """The pimsim-nn machine of a target and the cycle counts of its instructions."""

    target: Target
    front: int
    back: int
    local_memory_bytes: int = 0
    """Local memory written to the chip (0: the target's)."""

    @property
    def local_bytes(self) -> int:
        return self.local_memory_bytes or self.target.local_memory_bytes

    @classmethod
    def of(cls, target: Target, local_memory_bytes: int = 0) -> PimsimChip:
        passes = target.input_bits
        back = target.mvm_cycles // passes
        front = target.mvm_cycles - passes * back
        if back < 1 or front > back:
            raise ChipError(f"target {target.name}: mvm_cycles {target.mvm_cycles} cannot be "
                            f"expressed as pimsim-nn's pipelined MVM of {passes} input passes "
                            f"(needs at least {passes * passes} cycles)")
        return cls(target, front, back, local_memory_bytes)

    # -- figures -----------------------------------------------------------------------
    @property
    def act(self) -> int:
        """Bytes of one activation element on the chip (pimsim-nn's ibiw/8)."""
        return activation_bytes(self.target)

    @property
    def period_ns(self) -> float:
        return 1.0 / self.target.clock_ghz

    def flit_ns(self, src: int, dst: int) -> int:
        """pimsim-nn's NoC table entry: one flit from `src` to `dst` (0 for the memory)."""
        if src == GLOBAL_MEMORY or dst == GLOBAL_MEMORY:
            return 0
        return self.target.flit_ns(src, dst)

    def flits(self, nbytes: int) -> int:
        return noc.flits(self.target, nbytes)

    def local(self, nbytes: int) -> int:
        """Cycles of one local-memory read or write of `nbytes`."""
        return _ceil(nbytes, self.target.local_bytes_per_cycle)

    # -- instruction times (cycles of the unit, without the dispatch gap) -------------
    def mvm_compute(self) -> int:
        return self.front + self.back + (self.target.input_bits - 1) * max(self.front, self.back)

    def mvmul(self, crossbars: int = 1) -> int:
        return sum(self.mvmul_parts(crossbars))

    def mvmul_parts(self, crossbars: int = 1) -> tuple[int, int, int]:
        """(read, compute, write): read a crossbar row of inputs through the local port
        (pimsim-nn reads 8 times the bytes), compute, write the outputs of the array group
        through the port (`crossbars` wide: only this part grows)."""
        t = self.target
        return (self.local(t.crossbar_rows * self.act * 8), self.mvm_compute(),
                self.local(crossbars * t.crossbar_cols * self.act))

    def mvm_ranges(self, vec: int, out: int, crossbars: int) -> tuple[range, range]:
        """The local bytes pimsim-nn holds an `mvmul` for against the instructions in
        flight (its reorder buffer's conflict check): a crossbar row of inputs, whatever
        the tile's rows, and the group's outputs."""
        reads, writes = mvm_row_elements(self.target, crossbars)
        return range(vec, vec + reads * self.act), range(out, out + writes * self.act)

    def vector(self, length: int, operands: int) -> int:
        """A vector op over `length` elements reading `operands` vectors."""
        nbytes = length * self.act
        return (operands * self.local(nbytes) + _ceil(length, self.target.vector_lanes)
                * self.target.vector_op_cycles + self.local(nbytes))

    def lmv(self, nbytes: int) -> int:
        return noc.pimsim_copy_cycles(self.target, nbytes)

    def lldi(self, nbytes: int) -> int:
        return max(self.local(nbytes), 2)

    def ld(self, nbytes: int, core: int) -> int:
        return sum(self.global_access(nbytes, core, load=True)) + max(self.local(nbytes), 2)

    def st(self, nbytes: int, core: int) -> int:
        return sum(self.global_access(nbytes, core, load=False)) + 1

    def global_access(self, nbytes: int, core: int, load: bool) -> tuple[int, int]:
        """(cycles from the start of an `ld`/`st` to its global-memory service, the service
        cycles): the part pimsim-nn serializes chip-wide."""
        t = self.target
        accesses = _ceil(nbytes, t.shared_access_bytes)
        if load:
            return self.flit_ns(core, GLOBAL_MEMORY), accesses * t.shared_read_cycles
        return (self.local(nbytes) + self.flits(nbytes) * self.flit_ns(core, GLOBAL_MEMORY),
                accesses * t.shared_write_cycles)

    def send_read(self, nbytes: int) -> int:
        return noc.pimsim_read_cycles(self.target, nbytes)

    def recv_write(self, nbytes: int) -> int:
        return noc.pimsim_write_cycles(self.target, nbytes)

    # -- files -------------------------------------------------------------------------
    def config(self, noc_file: str, latency_timeout_ms: float) -> dict[str, Any]:
        """chip.json for `ChipTest PROGRAM chip.json` in latency mode."""
        t = self.target
        period = self.period_ns
        return {
            "chip_config": {
                "core_config": {
                    "period": period,
                    "rob_size": t.mvm_units,
                    "matrix_config": {
                        "xbar_array_count": t.crossbars_per_core,
                        "period": period,
                        "pipeline_mode": True,
                        "dac_resolution": 1,
                        "dac_count": t.crossbar_rows,
                        "dac_latency_cycle": self.front,
                        "input_buffer_latency_cycle": 0,
                        "xbar_size": [t.crossbar_rows, t.crossbar_cols],
                        "cell_precision": t.weight_bits,
                        "xbar_latency": 0,
                        "sample_hold_latency_cycle": 0,
                        "adc_resolution": t.weight_bits,
                        "adc_latency_cycle": self.back,
                        "adc_count": t.crossbar_cols,
                        "shift_adder_latency_cycle": 0,
                        "output_buffer_latency_cycle": 0,
                    },
                    "vector_width": t.vector_lanes,
                    "vector_latency_cycle": t.vector_op_cycles,
                    "local_memory_config": {
                        "memory_size": self.local_bytes,
                        "data_width": t.local_bytes_per_cycle,
                        "period": period,
                        "read_latency_cycle": 1,
                        "write_latency_cycle": 1,
                    },
                    "global_memory_switch_id": GLOBAL_MEMORY,
                },
                "global_memory_config": {
                    "memory_size": t.shared_memory_bytes,
                    "data_width": t.shared_access_bytes,
                    "period": period,
                    "read_latency_cycle": t.shared_read_cycles,
                    "write_latency_cycle": t.shared_write_cycles,
                },
                "network_config": {
                    "bus_topology": "mesh",
                    "bus_width": t.flit_bytes,
                    "layout": [t.mesh_rows, t.mesh_cols],
                    "net_config_file_path": noc_file,
                },
                "core_cnt": t.num_cores,
                "global_memory_switch_id": GLOBAL_MEMORY,
            },
            "sim_config": {
                "sim_mode": 1,
                "sim_time": 1,
                "latency_timeout_ms": latency_timeout_ms,
                "report_verbose_level": 1,
            },
        }

    def noc(self) -> dict[str, Any]:
        """The complete NoC table: every ordered pair of cores and each core with the
        global memory, per-flit latency in ns; energy 0 (not modelled)."""
        n = self.target.num_cores
        ids = [*range(n), GLOBAL_MEMORY]
        latency = {str(a): {str(b): self.flit_ns(a, b) for b in ids if b != a} for a in ids}
        energy = {a: dict.fromkeys(row, 0) for a, row in latency.items()}
        return {"latency": latency, "energy": energy}
