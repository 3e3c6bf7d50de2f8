"""A local-volume provisioner: every PVC of the e2e StorageClass gets a real loop-mounted ext4 volume.

Guarantees (needs root):
* For each Pending, unbound PVC of `storage_class` it creates `<workdir>/volumes/pvc-<uid>/disk.img`
  (a sparse file sized from the request, clamped to [`min_image_bytes`, `max_image_bytes`]:
  64 MiB to 256 MiB by default, so a "10Gi" claim is a 256 MiB filesystem), formats it ext4, mounts it
  at `<workdir>/volumes/pvc-<uid>/mnt` and creates PV `pvc-<uid>` (capacity = the request,
  claimRef = the PVC, reclaim Delete, annotation `pv.kubernetes.io/provisioned-by`). The PV is a
  `hostPath` volume, or a `local` volume with node affinity when the PVC carries the scheduler's
  `volume.kubernetes.io/selected-node` annotation (WaitForFirstConsumer classes).
  kube-controller-manager's PV controller does the binding.
* A Released/Failed PV of ours with reclaim Delete is unmounted (lazily), its image removed and the PV
  deleted.
* A bound PVC whose request grows past its reported capacity is expanded: PV `spec.capacity` becomes
  the request at once; the image grows (within the cap) and ext4 is resized online if the kernel
  allows it (needs CAP_SYS_RESOURCE), else offline as soon as no pod mounts the volume (until then
  the PVC carries Kubernetes' `FileSystemResizePending` condition); then PVC `status.capacity`
  becomes the request.
* `stop()` unmounts and removes every volume it made.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from e2e import kube as k

log = logging.getLogger("e2e.provisioner")

PROVISIONER = "e2e.jbod.dev/local"
STORAGE_CLASS = "jbod-e2e"
MiB = 1 << 20
_UNITS = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
}


def parse_quantity(q: str | int) -> int:
    """Bytes in a Kubernetes quantity such as `10Gi`, `500M`, `1e9` (no milli units)."""
    m = re.fullmatch(r"([0-9.]+(?:[eE][0-9]+)?)([a-zA-Z]*)", str(q).strip())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"unsupported quantity {q!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _run(*cmd: str) -> None:
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")


def is_mounted(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def _other_namespaces_mountinfo() -> list[list[list[str]]]:
    """The split mountinfo lines of every mount namespace but this process's own."""
    seen = {os.readlink("/proc/self/ns/mnt")}
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{entry}/ns/mnt")
            if ns in seen:
                continue
            seen.add(ns)
            with open(f"/proc/{entry}/mountinfo") as f:
                out.append([line.split() for line in f])
        except OSError:
            continue
    return out


def mounted_elsewhere(path: Path) -> bool:
    """Whether the filesystem mounted at `path` is also mounted in another mount namespace (a pod)."""
    dev = os.stat(path).st_dev
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    return any(fields[2] == wanted for info in _other_namespaces_mountinfo() for fields in info)


def is_mount_point_anywhere(path: str) -> bool:
    """Whether `path` is a mount point in any mount namespace (then it must not be removed: removing
    it would detach that mount)."""
    return any(
        fields[4] == path for info in [*_other_namespaces_mountinfo(), _own_mountinfo()] for fields in info
    )


def _own_mountinfo() -> list[list[str]]:
    with open("/proc/self/mountinfo") as f:
        return [line.split() for line in f]


def storage_class_manifest(name: str = STORAGE_CLASS, *, binding_mode: str = "Immediate") -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding_mode,
        "allowVolumeExpansion": True,
    }


class LocalVolumeProvisioner:
    """Watches PVCs and PVs and keeps real volumes behind them (see the module docstring)."""

    def __init__(
        self,
        kube: k.Kube,
        *,
        workdir: Path,
        storage_classes: tuple[str, ...] = (STORAGE_CLASS,),
        min_image_bytes: int = 64 * MiB,
        max_image_bytes: int = 256 * MiB,
        resync_seconds: float = 2.0,
    ) -> None:
        self.kube = kube
        self.volumes_dir = workdir / "volumes"
        self.storage_classes = storage_classes
        self.min_image_bytes = min_image_bytes
        self.max_image_bytes = max_image_bytes
        self._resync = resync_seconds
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._deleted: set[str] = set()
        self.pvcs = k.Reflector(
            "pvcs",
            kube.core.list_persistent_volume_claim_for_all_namespaces,
            on_change=lambda *_: self._wake.set(),
        )
        self.pvs = k.Reflector("pvs", kube.core.list_persistent_volume, on_change=lambda *_: self._wake.set())
        self._thread = threading.Thread(target=self._loop, name="provisioner", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------

    def ensure_storage_class(self, name: str = STORAGE_CLASS, *, binding_mode: str = "Immediate") -> None:
        """Create StorageClass `name` (provisioner e2e.jbod.dev/local) unless it exists."""
        if self.kube.get_or_none(self.kube.storage.read_storage_class, name) is None:
            self.kube.call(
                self.kube.storage.create_storage_class,
                storage_class_manifest(name, binding_mode=binding_mode),
            )
        if name not in self.storage_classes:
            self.storage_classes = (*self.storage_classes, name)

    def start(self) -> LocalVolumeProvisioner:
        self.volumes_dir.mkdir(parents=True, exist_ok=True)
        self.pvcs.start()
        self.pvs.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.pvcs.stop()
        self.pvs.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        for vol in sorted(self.volumes_dir.glob("pvc-*")) if self.volumes_dir.exists() else []:
            self._destroy(vol.name)

    # -- queries ---------------------------------------------------------------------------------

    def mount_path(self, pv_name: str) -> Path:
        return self.volumes_dir / pv_name / "mnt"

    def image_path(self, pv_name: str) -> Path:
        return self.volumes_dir / pv_name / "disk.img"

    # -- reconcile -------------------------------------------------------------------------------

    def _loop(self) -> None:
        self.pvcs.synced.wait(30)
        self.pvs.synced.wait(30)
        while not self._stop.is_set():
            self._wake.wait(self._resync)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.reconcile()
            except Exception:
                log.exception("Provisioner: reconcile failed")

    def reconcile(self) -> None:
        with self._lock:
            pvs = {pv["metadata"]["name"]: pv for pv in self.pvs.items()}
            for pvc in self.pvcs.items():
                spec, status = pvc.get("spec") or {}, pvc.get("status") or {}
                if spec.get("storageClassName") not in self.storage_classes:
                    continue
                pv_name = f"pvc-{pvc['metadata']['uid']}"
                if pvc["metadata"].get("deletionTimestamp"):
                    continue
                if status.get("phase") == "Pending" and not spec.get("volumeName") and pv_name not in pvs:
                    self._provision(pvc, pv_name)
                elif status.get("phase") == "Bound" and spec.get("volumeName") in pvs:
                    self._maybe_expand(pvc, pvs[spec["volumeName"]])
            for name, pv in pvs.items():
                ours = (pv["metadata"].get("annotations") or {}).get(
                    "pv.kubernetes.io/provisioned-by"
                ) == PROVISIONER
                phase = (pv.get("status") or {}).get("phase")
                if (
                    ours
                    and name not in self._deleted
                    and phase in ("Released", "Failed")
                    and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete"
                ):
                    self._destroy(name)
                    self.kube.call_ignoring((404,), self.kube.core.delete_persistent_volume, name)
                    self._deleted.add(name)
                    log.info("Deleted volume %s", name)

    def _image_bytes(self, requested: int) -> int:
        return max(self.min_image_bytes, min(self.max_image_bytes, requested))

    def _provision(self, pvc: k.Obj, pv_name: str) -> None:
        meta = pvc["metadata"]
        request = pvc["spec"]["resources"]["requests"]["storage"]
        img, mnt = self.image_path(pv_name), self.mount_path(pv_name)
        mnt.mkdir(parents=True, exist_ok=True)
        if not is_mounted(mnt):
            if not img.exists():
                _run("truncate", "-s", str(self._image_bytes(parse_quantity(request))), str(img))
                _run("mkfs.ext4", "-q", "-F", "-m", "0", "-E", "nodiscard", str(img))
                (img.parent / "fs-bytes").write_text(str(img.stat().st_size))
            _run("mount", "-o", "loop", str(img), str(mnt))
        mode = pvc["spec"].get("volumeMode") or "Filesystem"
        selected_node = (meta.get("annotations") or {}).get("volume.kubernetes.io/selected-node")
        source: dict[str, Any]
        if selected_node:
            source = {
                "local": {"path": str(mnt)},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/hostname",
                                        "operator": "In",
                                        "values": [selected_node],
                                    }
                                ]
                            }
                        ]
                    }
                },
            }
        else:
            source = {"hostPath": {"path": str(mnt), "type": "Directory"}}
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": pv_name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
                "labels": {"e2e.jbod.dev/volume": "true"},
            },
            "spec": {
                "capacity": {"storage": request},
                "accessModes": pvc["spec"].get("accessModes") or ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": pvc["spec"]["storageClassName"],
                "volumeMode": mode,
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": meta["namespace"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                **source,
            },
        }
        self.kube.call_ignoring((409,), self.kube.core.create_persistent_volume, pv)
        log.info(
            "Provisioned %s for %s/%s at %s (%d MiB image)",
            pv_name,
            meta["namespace"],
            meta["name"],
            mnt,
            img.stat().st_size // MiB,
        )

    def _maybe_expand(self, pvc: k.Obj, pv: k.Obj) -> None:
        ours = (pv["metadata"].get("annotations") or {}).get("pv.kubernetes.io/provisioned-by") == PROVISIONER
        want = pvc["spec"]["resources"]["requests"]["storage"]
        reported = ((pvc.get("status") or {}).get("capacity") or {}).get("storage") or pv["spec"]["capacity"][
            "storage"
        ]
        if not ours or parse_quantity(want) <= parse_quantity(reported):
            return
        name, meta = pv["metadata"]["name"], pvc["metadata"]
        if parse_quantity(pv["spec"]["capacity"]["storage"]) < parse_quantity(want):
            self.kube.call(
                self.kube.core.patch_persistent_volume,
                name,
                {"spec": {"capacity": {"storage": want}}},
                _content_type=k.MERGE,
            )
        status: dict[str, Any]
        if self._grow_filesystem(name, parse_quantity(want)):
            status = {
                "capacity": {"storage": want},
                "allocatedResources": {"storage": want},
                "conditions": None,
            }
            log.info("Expanded %s to %s", name, want)
        else:
            conditions = (pvc.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "FileSystemResizePending" for c in conditions):
                return
            status = {
                "allocatedResources": {"storage": want},
                "conditions": [{
                    "type": "FileSystemResizePending",
                    "status": "True",
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "message": "Waiting for user to (re-)start a pod to finish file system resize of volume on node.",
                }],
            }  # fmt: skip
            log.info("Expansion of %s to %s pending: the volume is in use", name, want)
        self.kube.call(
            self.kube.core.patch_namespaced_persistent_volume_claim_status,
            meta["name"],
            meta["namespace"],
            {"status": status},
            _content_type=k.MERGE,
        )

    def _grow_filesystem(self, pv_name: str, want_bytes: int) -> bool:
        """Grow the image and its ext4 to `want_bytes` (clamped); False while that needs an offline
        resize and a pod still mounts the volume. Online resize needs CAP_SYS_RESOURCE (absent in
        some sandboxes); offline resize unmounts, checks and resizes the image, then mounts it again."""
        img, mnt = self.image_path(pv_name), self.mount_path(pv_name)
        marker = self.volumes_dir / pv_name / "fs-bytes"
        new_size = self._image_bytes(want_bytes)
        if marker.exists() and int(marker.read_text()) >= new_size:
            return True
        if img.stat().st_size < new_size:
            _run("truncate", "-s", str(new_size), str(img))
        loop = subprocess.run(
            ["findmnt", "-n", "-o", "SOURCE", str(mnt)], check=False, capture_output=True, text=True
        ).stdout.strip()
        grown = False
        if loop.startswith("/dev/loop"):
            _run("losetup", "-c", loop)
            grown = subprocess.run(["resize2fs", loop], check=False, capture_output=True).returncode == 0
        if not grown:
            if mounted_elsewhere(mnt):
                return False
            if is_mounted(mnt):
                _run("umount", str(mnt))
            subprocess.run(["e2fsck", "-f", "-y", str(img)], check=False, capture_output=True)
            _run("resize2fs", str(img))
            _run("mount", "-o", "loop", str(img), str(mnt))
        marker.write_text(str(new_size))
        return True

    def _destroy(self, pv_name: str) -> None:
        vol_dir, mnt = self.volumes_dir / pv_name, self.mount_path(pv_name)
        if is_mounted(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
        shutil.rmtree(vol_dir, ignore_errors=True)
