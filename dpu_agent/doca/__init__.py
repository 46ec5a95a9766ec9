"""DOCA transport, trainer side: Comch for control messages, DMA for the trainer's regions (BlueField DPU).

:class:`DocaHostEndpoint` (``host.py``, the x86 host) implements
:class:`~dpu_agent.transport.HostEndpoint`, like the host emulation in :mod:`dpu_agent.shm`.
It allocates every region of a table in page-aligned host memory, registers it in a
``doca_mmap`` with PCI read-write permission and exports it (``doca_mmap_export_pci``); the
export descriptors travel to the agent inside the ``add_table`` message. Control messages go
over a Comch *client*.

The agent side is the ``sni-agent`` binary's C++ (``sni-agent --doca``,
``csrc/agent/doca_transport.cpp``) on the DPU's Arm cores: a Comch *server* receives the
messages, the trainer's regions are imported (``doca_mmap_create_from_export``) and rows move
between agent-local staging buffers and the trainer's memory by DMA memcpy tasks, without
involving the host CPU.

The rest of the package: ``bindings.py`` (the DOCA C API through ctypes, :class:`Doca`,
:func:`load`, error codes), ``framing.py`` (how a control message becomes Comch frames),
``memory.py`` (page-aligned buffers), ``side.py`` (device, progress engine and Comch
messaging of the endpoint).

On real hardware: the host and the DPU address the BlueField by different PCI functions
(host: the BlueField PF as the host sees it, e.g. ``b1:00.0``; DPU: its own device, e.g.
``03:00.0``), and the agent's Comch server needs the *representor* of the host function
whose clients may connect: give its PCI address to the agent as ``--rep-pci`` (or
``$SNI_DOCA_REP_PCI``); without one, the first network representor of the device is used.
"""
from .bindings import (DOCA_ERROR_AGAIN, DOCA_ERROR_BAD_STATE, DOCA_ERROR_CONNECTION_ABORTED,
                       DOCA_ERROR_CONNECTION_RESET, DOCA_ERROR_IN_PROGRESS, DOCA_ERROR_INVALID_VALUE,
                       DOCA_ERROR_NO_MEMORY, DOCA_ERROR_NOT_CONNECTED, DOCA_ERROR_NOT_FOUND,
                       DOCA_ERROR_TIME_OUT, DOCA_SUCCESS, Doca, DocaError, DocaUnavailable,
                       default_lib_dir, load)
from .host import DocaHostEndpoint

__all__ = ["Doca", "DocaError", "DocaHostEndpoint", "DocaUnavailable",
           "default_lib_dir", "load",
           "DOCA_SUCCESS", "DOCA_ERROR_AGAIN", "DOCA_ERROR_INVALID_VALUE", "DOCA_ERROR_NO_MEMORY",
           "DOCA_ERROR_TIME_OUT", "DOCA_ERROR_CONNECTION_RESET", "DOCA_ERROR_CONNECTION_ABORTED",
           "DOCA_ERROR_NOT_CONNECTED", "DOCA_ERROR_NOT_FOUND", "DOCA_ERROR_BAD_STATE",
           "DOCA_ERROR_IN_PROGRESS"]
