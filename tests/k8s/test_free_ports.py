#!/usr/bin/python3
"""controlplane._free_ports: the listening ports every k8s scenario gives its programs."""
import os
import socket
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import controlplane  # noqa: E402


class FreePortsTest(unittest.TestCase):
    def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range(self):
        """A port of the ephemeral range can be taken by any outgoing connection while a restarted
        kubelet is down; none is picked from it."""
        first, last = controlplane._ephemeral_ports()
        for _ in range(200):
            ports = controlplane._free_ports(5)
            self.assertEqual(len(set(ports)), 5)
            for port in ports:
                self.assertFalse(first <= port <= last, "%d is in the ephemeral range %d-%d" % (port, first, last))
                self.assertGreaterEqual(port, 1024)
        with socket.socket() as s:
            s.bind(("", ports[0]))  # free on every address, as picked

    def test_a_port_someone_listens_on_is_never_picked(self):
        with socket.socket() as held:
            held.bind(("127.0.0.1", 0))
            held.listen()
            taken = held.getsockname()[1]
            ranges = [(taken, taken + 2)]
            for _ in range(20):
                try:
                    ports = controlplane._free_ports(2, ranges)
                except controlplane.ControlPlaneError:
                    continue  # another program holds one of the two others: nothing to conclude
                self.assertNotIn(taken, ports)
                self.assertEqual(sorted(ports), [taken + 1, taken + 2])
                break
            with self.assertRaises(controlplane.ControlPlaneError):
                controlplane._free_ports(3, ranges)


if __name__ == "__main__":
    unittest.main()
