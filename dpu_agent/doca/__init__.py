"""DOCA transport: Comch for control messages, DMA for the trainer's regions (BlueField DPU).

Same two halves as the host emulation in :mod:`dpu_agent.shm`, behind the interfaces of
:mod:`dpu_agent.transport`:

* :class:`DocaHostEndpoint` (``host.py``) -- trainer side (x86 host). Allocates every region
  of a table in page-aligned host memory, registers it in a ``doca_mmap`` with PCI
  read-write permission and exports it (``doca_mmap_export_pci``); the export descriptors
  travel to the agent inside the ``add_table`` message. Control messages go over a Comch
  *client*.
* :class:`DocaAgentTransport` (``agent.py``) -- agent side (the DPU's Arm cores). A Comch
  *server* receives the messages; ``attach`` imports the trainer's regions
  (``doca_mmap_create_from_export``); ``read``/``write`` move rows between agent-local
  staging buffers (registered in local mmaps) and the trainer's memory with DMA memcpy
  tasks, without involving the host CPU.

The rest of the package: ``bindings.py`` (the DOCA C API through ctypes, :class:`Doca`,
:func:`load`, error codes), ``framing.py`` (how a control message becomes Comch frames),
``memory.py`` (page-aligned buffers), ``side.py`` (device, progress engine and Comch
messaging, common to both sides).

On real hardware: the host and the DPU address the BlueField by different PCI functions
(host: the BlueField PF as the host sees it, e.g. ``b1:00.0``; DPU: its own device, e.g.
``03:00.0``), and the DPU's Comch server needs the *representor* of the host function
whose clients may connect: give its PCI address as ``rep_pci`` (or ``$SNI_DOCA_REP_PCI``);
without one, the first network representor of the device is used.
"""
from .agent import DocaAgentTransport
from .bindings import (DOCA_ERROR_AGAIN, DOCA_ERROR_BAD_STATE, DOCA_ERROR_CONNECTION_ABORTED,
                       DOCA_ERROR_CONNECTION_RESET, DOCA_ERROR_IN_PROGRESS, DOCA_ERROR_INVALID_VALUE,
                       DOCA_ERROR_NO_MEMORY, DOCA_ERROR_NOT_CONNECTED, DOCA_ERROR_NOT_FOUND,
                       DOCA_ERROR_TIME_OUT, DOCA_SUCCESS, Doca, DocaError, DocaUnavailable,
                       default_lib_dir, load)
from .host import DocaHostEndpoint

__all__ = ["Doca", "DocaAgentTransport", "DocaError", "DocaHostEndpoint", "DocaUnavailable",
           "default_lib_dir", "load",
           "DOCA_SUCCESS", "DOCA_ERROR_AGAIN", "DOCA_ERROR_INVALID_VALUE", "DOCA_ERROR_NO_MEMORY",
           "DOCA_ERROR_TIME_OUT", "DOCA_ERROR_CONNECTION_RESET", "DOCA_ERROR_CONNECTION_ABORTED",
           "DOCA_ERROR_NOT_CONNECTED", "DOCA_ERROR_NOT_FOUND", "DOCA_ERROR_BAD_STATE",
           "DOCA_ERROR_IN_PROGRESS"]
