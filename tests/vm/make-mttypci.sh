#!/usr/bin/env bash
# Builds mttypci.ko for the VM lab: the kernel's mtty sample with its mdev parent on a PCI device
# (QEMU's edu, 1234:11e8, run-in-vm.sh adds it with KVGPU_VM_EDU=1) instead of a virtual class
# device. libvirt offers mdev types only on PCI (and s390) parents, as an NVIDIA GPU is one; the
# stock samples are invisible to it. Called by setup-lab.sh.
# usage: make-mttypci.sh LAB_DIR OUT_DIR   (prints the path of the module)
set -o errexit -o nounset -o pipefail
lab=$1
mod=$2
kver=$(basename "$lab")
[[ -d $lab/root/usr/src/linux-headers-$kver ]] || kver=$(ls "$lab/root/lib/modules")
src=$lab/src/samples/vfio-mdev/mtty.c
mkdir -p "$mod"
# 1. Rename everything user-visible so it loads beside stock mtty (chrdev region, mdev driver,
#    vfio ops); 2. drop the stock init/exit (class + virtual device parent) and append our own.
sed -E \
  -e 's/^(#define MTTY_CLASS_NAME[[:space:]]+)"mtty"/\1"mttypci"/' \
  -e 's/^(#define MTTY_NAME[[:space:]]+)"mtty"/\1"mttypci"/' \
  -e 's/\.name = "vfio-mtty",/.name = "vfio-mttypci",/' \
  -e 's/^(\t\t\.name = )"mtty",/\1"mttypci",/' \
  -e '/^static void mtty_device_release\(struct device \*dev\)/,$d' \
  "$src" >"$mod/mttypci.c"
cat >>"$mod/mttypci.c" <<'CEOF'
/*
 * mttypci: the mdev parent is the QEMU "edu" PCI device (-device edu, 1234:11e8).
 *
 * The mdev core names a type "<dev_driver_string(parent)>-<sysfs_name>" (6.1
 * drivers/vfio/mdev/mdev_sysfs.c), so a parent found with pci_get_device() alone,
 * bound to no driver, would offer "pci-1"/"pci-2". We therefore bind a PCI driver
 * named "mttypci" to edu and register the mdev parent from its probe: the types
 * become mttypci-1 / mttypci-2 under /sys/bus/pci/devices/<bdf>/mdev_supported_types.
 * probe takes its own pci_dev reference (pci_dev_get), remove drops it.
 */
#include <linux/pci.h>

#define MTTYPCI_VENDOR	0x1234
#define MTTYPCI_DEVICE	0x11e8

static struct pci_dev *mttypci_pdev;

static int mttypci_pci_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int ret;

	if (mttypci_pdev)	/* one global parent, as in mtty: first edu only */
		return -EBUSY;
	mttypci_pdev = pci_dev_get(pdev);
	ret = mdev_register_parent(&mtty_dev.parent, &pdev->dev, &mtty_driver,
				   mtty_mdev_types, ARRAY_SIZE(mtty_mdev_types));
	if (ret) {
		pci_dev_put(mttypci_pdev);
		mttypci_pdev = NULL;
		return ret;
	}
	dev_info(&pdev->dev, "mttypci: mdev parent registered\n");
	return 0;
}

static void mttypci_pci_remove(struct pci_dev *pdev)
{
	if (pdev != mttypci_pdev)
		return;
	mdev_unregister_parent(&mtty_dev.parent);
	pci_dev_put(mttypci_pdev);
	mttypci_pdev = NULL;
}

static const struct pci_device_id mttypci_pci_ids[] = {
	{ PCI_DEVICE(MTTYPCI_VENDOR, MTTYPCI_DEVICE) },
	{ }
};
/* No MODULE_DEVICE_TABLE: never autoload, only an explicit insmod. */

static struct pci_driver mttypci_pci_driver = {
	.name = MTTY_NAME,
	.id_table = mttypci_pci_ids,
	.probe = mttypci_pci_probe,
	.remove = mttypci_pci_remove,
};

static int __init mtty_dev_init(void)
{
	struct pci_dev *pdev;
	int ret;

	pr_info("mttypci: %s\n", __func__);
	memset(&mtty_dev, 0, sizeof(mtty_dev));
	idr_init(&mtty_dev.vd_idr);

	/* Fail early and clearly when QEMU has no -device edu. */
	pdev = pci_get_device(MTTYPCI_VENDOR, MTTYPCI_DEVICE, NULL);
	if (!pdev) {
		pr_err("mttypci: no PCI device %04x:%04x (QEMU -device edu)\n",
		       MTTYPCI_VENDOR, MTTYPCI_DEVICE);
		return -ENODEV;
	}
	pci_dev_put(pdev);

	ret = alloc_chrdev_region(&mtty_dev.vd_devt, 0, MINORMASK + 1, MTTY_NAME);
	if (ret < 0)
		return ret;
	cdev_init(&mtty_dev.vd_cdev, &vd_fops);
	cdev_add(&mtty_dev.vd_cdev, mtty_dev.vd_devt, MINORMASK + 1);

	ret = mdev_register_driver(&mtty_driver);
	if (ret)
		goto err_cdev;
	ret = pci_register_driver(&mttypci_pci_driver);
	if (ret)
		goto err_driver;
	if (!mttypci_pdev) {	/* edu exists but another driver holds it */
		pr_err("mttypci: could not bind %04x:%04x\n", MTTYPCI_VENDOR, MTTYPCI_DEVICE);
		ret = -ENODEV;
		goto err_pci;
	}
	return 0;

err_pci:
	pci_unregister_driver(&mttypci_pci_driver);
err_driver:
	mdev_unregister_driver(&mtty_driver);
err_cdev:
	cdev_del(&mtty_dev.vd_cdev);
	unregister_chrdev_region(mtty_dev.vd_devt, MINORMASK + 1);
	return ret;
}

static void __exit mtty_dev_exit(void)
{
	pci_unregister_driver(&mttypci_pci_driver);	/* -> remove: parent + pdev ref */
	idr_destroy(&mtty_dev.vd_idr);
	mdev_unregister_driver(&mtty_driver);
	cdev_del(&mtty_dev.vd_cdev);
	unregister_chrdev_region(mtty_dev.vd_devt, MINORMASK + 1);
	pr_info("mttypci: Unloaded!\n");
}

module_init(mtty_dev_init)
module_exit(mtty_dev_exit)

MODULE_LICENSE("GPL v2");
MODULE_INFO(supported, "mtty sample with its mdev parent on the QEMU edu PCI device");
MODULE_VERSION(VERSION_STRING);
MODULE_AUTHOR(DRIVER_AUTHOR);
CEOF
for want in '"mttypci"' '"vfio-mttypci"' 'name = "mttypci"'; do
  grep -q -- "$want" "$mod/mttypci.c" || { echo "mttypci.c: '$want' not applied" >&2; exit 1; }
done
! grep -q 'class_create' "$mod/mttypci.c" || { echo "stock init still present" >&2; exit 1; }
echo 'obj-m := mttypci.o' >"$mod/Kbuild"
make -s -C "$lab/root/usr/src/linux-headers-$kver" M="$mod" modules -j1 2>&1 |
  grep -v 'Skipping BTF generation' >&2 || true
[[ -f $mod/mttypci.ko ]] || { echo "building mttypci.ko failed" >&2; exit 1; }
echo "$mod/mttypci.ko"

