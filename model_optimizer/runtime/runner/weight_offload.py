"""Weight offload (`cpu_offload_gb`): decoder layers whose weights live in host memory and are copied to
the device just ahead of the forward that needs them, so a model larger than the GPU still runs.

Which layers (the rule itself is torch-free, offload_rule.py, so the tuner and `mopt inspect` apply the
very same one): whole decoder layers, spread evenly over the depth (with k of n offloaded, layer
(j + 1) * n // k - 1 for j < k), not taken from the end. Each copy then has the compute of the on-device
layers before it to hide behind; offloading the last k layers would leave every copy but the first two
with a single layer's compute to overlap. Layers are chosen until their bytes reach the asked amount,
so at least that much moves (the whole layer is the unit: a partial layer would still need its slot).

How: each offloaded layer's weights (parameters, and a quantized linear layer's qweight / scales /
zeros buffers: so int4 moves a quarter of bf16's bytes) are packed into one flat host buffer per layer,
all of them one allocation page-locked with cudaHostRegister (not torch's pinned allocator, which rounds
every allocation up to a power of two). Two device slots (one when a single layer is offloaded), each the size of the
largest offloaded layer, take turns: offloaded layer k's tensors are views into slot k % 2 for good, so the modules never change and the copy is one memcpy.
On a side stream, copy k + 2 waits for an event recorded after layer k's forward (its slot is free),
and layer k's forward waits for the event of its own copy. The first two copies start with layer 0,
after the side stream has waited for everything queued before this forward.

CUDA graphs stay on: the hooks run while the decode graphs are captured, the side stream forks from
and joins the capturing stream through the events, and a cudaMemcpyAsync from page-locked host memory
is a graph node like a kernel (queued through the CUDA runtime itself, host_memory.py: torch's `copy_`
refuses registered memory in a capture); the slot addresses never change, so replays read fresh copies.

On the CPU there is no second memory: the "host" buffers and the "device" slots are both CPU tensors
and the copies are plain ones, but every other step (packing, slots, views, the hooks' order) is the
one a GPU runs, which is what the CPU tests check against unoffloaded output.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

import torch
from torch import nn

from model_optimizer.runtime.layers.linear import Linear
from model_optimizer.runtime.runner.host_memory import PAGE, copy_host_to_device, host_buffer, page_lock
from model_optimizer.runtime.runner.offload_rule import (
    LayerSize,
    aligned,
    num_slots,
    packed_bytes,
)
from model_optimizer.runtime.runner.offload_rule import (  # the loader and tests import it from here
    choose_offloaded_layers as choose_offloaded_layers,
)

log = logging.getLogger(__name__)


def layer_weights(layer: nn.Module) -> list[tuple[nn.Module, str, torch.Tensor]]:
    """(owning module, name, tensor) of what offloading moves: every parameter, and the buffers of linear
    layers (quantized weights). Other buffers (rotary tables shared by all layers, KV scales) stay put."""
    found, seen = [], set()
    for module in layer.modules():
        tensors = list(module._parameters.items())
        if isinstance(module, Linear):
            tensors += list(module._buffers.items())
        for name, tensor in tensors:
            if tensor is not None and id(tensor) not in seen:
                seen.add(id(tensor))
                found.append((module, name, tensor))
    return found


def estimated_bytes(layer: nn.Module) -> int:
    """Bytes a layer's weights will hold once loaded: a quantized linear layer counts its method's bits per
    weight plus its scales, whatever float placeholder it holds before the weights are rounded."""
    return sum(_loaded_tensor_bytes(layer))


def layer_sizes(layers: nn.ModuleList) -> list[LayerSize]:
    """Each layer's sizes for the offload rule (offload_rule.py): estimated_bytes, and the flat buffer its
    tensors will pack into (exact for float weights; a quantized layer's codes and scales as estimated)."""
    return [LayerSize(sum(sizes), packed_bytes(sizes)) for sizes in map(_loaded_tensor_bytes, layers)]


def _loaded_tensor_bytes(layer: nn.Module) -> list[int]:
    """The bytes of each tensor offloading would move once the weights are loaded (estimated_bytes)."""
    sizes = []
    for module, _, tensor in layer_weights(layer):
        if getattr(module, "quant_method", None) is None:
            sizes.append(tensor.numel() * tensor.element_size())
    for module in layer.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(module, Linear) and method is not None:
            weights = module.in_features * module.out_features
            sizes += [weights * method.bits // 8, weights // getattr(method, "group_size", module.in_features) * 4]
    return sizes


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The model's stack of decoder layers (`model.model.layers`), or a ValueError for models without one."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"cpu_offload_gb needs a decoder model with model.layers; {type(model).__name__} has none")
    return layers


@dataclass
class LayerLayout:
    """Where each weight of one offloaded layer sits in its flat buffer (host and slot alike)."""

    entries: list[tuple[nn.Module, str, int, torch.dtype, torch.Size]]
    """(module, name, byte offset, dtype, shape) of each tensor, offsets ALIGN-byte aligned (offload_rule.py)."""
    nbytes: int

    @classmethod
    def of(cls, layer: nn.Module) -> LayerLayout:
        entries, offset, sizes = [], 0, []
        for module, name, tensor in layer_weights(layer):
            entries.append((module, name, offset, tensor.dtype, tensor.shape))
            sizes.append(tensor.numel() * tensor.element_size())
            offset += aligned(sizes[-1])
        return cls(entries, packed_bytes(sizes))

    @torch.no_grad()
    def fill(self, host: torch.Tensor) -> None:
        """Copy the layer's current tensors into `host` (uint8, nbytes)."""
        for module, name, start, dtype, shape in self.entries:
            _view(host, start, dtype, shape).copy_(getattr(module, name))

    def point_into(self, slot: torch.Tensor) -> None:
        """Make every tensor of the layer a view into `slot` (its data arrives there by a copy); the tensors
        it held (built in host memory, or on the device) are then unreferenced and freed."""
        for module, name, start, dtype, shape in self.entries:
            view = _view(slot, start, dtype, shape)
            if name in module._parameters:
                module._parameters[name].data = view
            else:
                module._buffers[name] = view


def _view(buffer: torch.Tensor, start: int, dtype: torch.dtype, shape: torch.Size) -> torch.Tensor:
    """The (shape, dtype) tensor stored at byte `start` of a flat uint8 buffer."""
    nbytes = shape.numel() * torch.empty((), dtype=dtype).element_size()
    return buffer[start : start + nbytes].view(dtype).view(shape)


class WeightOffloader:
    """Streams the offloaded layers' weights into two device slots around each forward (module docstring)."""

    def __init__(self, layers: nn.ModuleList, layer_ids: list[int], device: torch.device) -> None:
        self.layer_ids = layer_ids
        self.device = device
        cuda = device.type == "cuda"
        layouts = [LayerLayout.of(layers[i]) for i in layer_ids]
        starts = [0]
        for layout in layouts:
            starts.append(starts[-1] + -(-layout.nbytes // PAGE) * PAGE)
        self.buffer = host_buffer(starts[-1])
        """All offloaded weights, one page-locked allocation (one cudaHostRegister)."""
        self.hosts = [self.buffer[s : s + layout.nbytes] for s, layout in zip(starts, layouts)]
        slot_bytes = max(layout.nbytes for layout in layouts)
        self.slots = [torch.empty(slot_bytes, dtype=torch.uint8, device=device) for _ in range(num_slots(len(layouts)))]
        for k, (i, layout) in enumerate(zip(layer_ids, layouts)):  # one layer at a time: host memory peaks
            layout.fill(self.hosts[k])  # at the offloaded bytes plus one layer
            layout.point_into(self.slots[k % 2])
            _move_other_buffers(layers[i], device)
        if cuda:
            page_lock(self, self.buffer, "cpu_offload_gb")
            torch.cuda.empty_cache()  # layers built on the device (and moved) leave cached blocks behind
        self.stream = torch.cuda.Stream(device) if cuda else None
        self.copied = [torch.cuda.Event() for _ in layouts] if cuda else []
        self.freed = [torch.cuda.Event() for _ in layouts] if cuda else []
        self.num_copies = 0
        """Layer copies issued so far (tests read it: every forward copies every offloaded layer once)."""
        layers[0].register_forward_pre_hook(self._start)
        for k, i in enumerate(layer_ids):
            layers[i].register_forward_pre_hook(partial(self._before, k))
            layers[i].register_forward_hook(partial(self._after, k))

    @property
    def host_bytes(self) -> int:
        """Bytes of weights kept in host memory."""
        return sum(len(h) for h in self.hosts)

    @property
    def device_bytes(self) -> int:
        """Bytes the slots take on the device (what offloading adds there)."""
        return sum(len(s) for s in self.slots)

    def _copy(self, k: int) -> None:
        host = self.hosts[k]
        slot = self.slots[k % len(self.slots)][: len(host)]
        self.num_copies += 1
        if self.stream is None:
            slot.copy_(host)
            return
        copy_host_to_device(slot, host, self.stream)  # registered source: async, capturable
        self.copied[k].record(self.stream)

    def _start(self, module: nn.Module, args: tuple) -> None:
        if self.stream is not None:  # the slots' last readers (the previous forward) are queued before this
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
        for k in range(len(self.slots)):
            self._copy(k)

    def _before(self, k: int, module: nn.Module, args: tuple) -> None:
        if self.stream is not None:
            torch.cuda.current_stream(self.device).wait_event(self.copied[k])

    def _after(self, k: int, module: nn.Module, args: tuple, output: object) -> None:
        if k + 2 >= len(self.hosts):
            return
        if self.stream is not None:  # layer k is done with its slot: layer k + 2 may overwrite it
            self.freed[k].record(torch.cuda.current_stream(self.device))
            self.stream.wait_event(self.freed[k])
        self._copy(k + 2)


def _move_other_buffers(layer: nn.Module, device: torch.device) -> None:
    """Buffers offloading leaves in place (KV scales) go to the device, wherever the layer was built."""
    for module in layer.modules():
        for name, buffer in module._buffers.items():
            if buffer is not None and buffer.device != device:
                module._buffers[name] = buffer.to(device)


def offload_layers(model: nn.Module, layer_ids: list[int], device: torch.device) -> WeightOffloader:
    """Keep the weights of `layer_ids` in host memory and stream them in at each forward of `model`."""
    layers = decoder_layers(model)
    for i in layer_ids:
        _match_kernel_packing(layers[i], device)
    offloader = WeightOffloader(layers, layer_ids, device)
    log.info(
        "weight offload: %d of %d decoder layers (%s) keep %.2f GiB in host memory; %d device slots of %.1f MiB",
        len(layer_ids),
        len(layers),
        ", ".join(map(str, layer_ids)),
        offloader.host_bytes / 2**30,
        len(offloader.slots),
        len(offloader.slots[0]) / 2**20,
    )
    return offloader


def _match_kernel_packing(layer: nn.Module, device: torch.device) -> None:
    """An int4 layer processed in host memory kept the checkpoint's packing; give it the one the device's
    kernels read (what processing on the device would have chosen: layers/quantization/method.py)."""
    from model_optimizer.runtime.kernels import quant_linear
    from model_optimizer.runtime.kernels import quant_reference as ref

    for module in layer.modules():
        method = getattr(module, "quant_method", None)
        if getattr(method, "packing", None) != "sequential" or module.qweight.device == device:
            continue
        if quant_linear.int4_kernel_packing(device, method.act_dtype, method.group_size, module.in_features):
            module.qweight = ref.repack_int4(module.qweight, "sequential", "planes")
            method.packing = "planes"
