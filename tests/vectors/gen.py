#!/usr/bin/env python3
"""Fills in the `frame:` hex of MetaRoCE golden vectors from their fields.

This is a second, independent implementation of the v1 encoding, written
from docs/protocol.md with Python's struct module. It shares no code with
proto/ on purpose: tests/proto/vectors_test.cc checks that the C++ builder
produces exactly these bytes and that the C++ parser returns exactly these
fields, so the two implementations check each other.

  tests/vectors/gen.py            rewrite every *.txt's frame: section
  tests/vectors/gen.py --check    exit 1 if any frame: section is stale
  tests/vectors/gen.py --corpus DIR   also write fuzz seeds: <name>.frame,
                                      <name>.udp (UDP payload), <name>.vlan

Format of a vector file: tests/vectors/README.md.
"""
import ipaddress
import os
import struct
import sys

UDP_PORT = 4796

# opcode name -> (value, extension headers in wire order, payload allowed)
OPCODES = {
    "SEND": (0x01, ["SETH"], True),
    "SEND_IMM": (0x02, ["SETH", "IMM"], True),
    "RDMA_WRITE": (0x03, ["RETH"], True),
    "RDMA_WRITE_IMM": (0x04, ["RETH", "IMM"], True),
    "RDMA_READ_REQ": (0x05, ["RETH"], False),
    "RDMA_READ_RESP": (0x06, [], True),
    "ATOMIC_CMP_SWAP": (0x07, ["AtomicETH"], False),
    "ATOMIC_FETCH_ADD": (0x08, ["AtomicETH"], False),
    "ATOMIC_RESP": (0x09, ["AtomicAckETH"], False),
    # memory windows (docs/protocol.md section 15)
    "SEND_INV": (0x0A, ["SETH", "IETH"], True),
    "ACK": (0x10, ["ACKH"], False),
    "NACK": (0x11, ["NACKH"], False),
    "PROBE": (0x12, ["PROBEH"], False),
    "PROBE_REPLY": (0x13, ["PROBEH"], False),
    # connection management (docs/protocol.md section 12)
    "CM_REQ": (0x18, ["CMH"], True),
    "CM_MRA": (0x19, ["CMH"], True),
    "CM_REJ": (0x1A, ["CMH"], True),
    "CM_REP": (0x1B, ["CMH"], True),
    "CM_RTU": (0x1C, ["CMH"], True),
    "CM_DREQ": (0x1D, ["CMH"], True),
    "CM_DREP": (0x1E, ["CMH"], True),
    # datagram service (docs/protocol.md section 13)
    "UD_SEND": (0x20, ["DETH"], True),
    "UD_SEND_IMM": (0x21, ["DETH", "IMM"], True),
    "UC_SEND": (0x24, ["SETH"], True),
    "UC_SEND_IMM": (0x25, ["SETH", "IMM"], True),
    "UC_RDMA_WRITE": (0x26, ["RETH"], True),
    "UC_RDMA_WRITE_IMM": (0x27, ["RETH", "IMM"], True),
}
# CM private data limits (section 12.4)
CM_MAX_PRIVATE = {"CM_REQ": 92, "CM_MRA": 222, "CM_REJ": 148, "CM_REP": 196, "CM_RTU": 224,
                  "CM_DREQ": 220, "CM_DREP": 224}
NACK_REASONS = {"RNR": 1, "REMOTE_ACCESS_ERROR": 2, "INVALID_REQUEST": 3,
                "REMOTE_OPERATION_ERROR": 4, "SEQUENCE_ERROR": 5, "TRIMMED": 6}

# header -> list of (field key, struct format); "x" entries are reserved bytes.
EXT_LAYOUT = {
    "RETH": [("reth.va", "Q"), ("reth.rkey", "I"), ("reth.length", "I")],
    "SETH": [("seth.length", "I")],
    "IMM": [("imm", "I")],
    "IETH": [("ieth.rkey", "I")],
    "AtomicETH": [("atomic.va", "Q"), ("atomic.rkey", "I"), ("atomic.swap_add", "Q"),
                  ("atomic.compare", "Q")],
    "AtomicAckETH": [("atomic_ack.original", "Q")],
    "ACKH": [("ack.cum_psn", "I"), ("ack.sack", "Q"), ("ack.echo_ts", "I"), ("ack.credit", "I"),
             ("ack.ce_count", "H"), ("ack.echo_path", "B"), ("ack.ack_flags", "B"),
             ("ack.rcv_msn", "I")],
    "NACKH": [("nack.reason", "B"), ("nack.rnr_timer", "B"), (None, "2x"), ("nack.psn", "I")],
    "PROBEH": [("probe.nonce", "I"), ("probe.echo_ts", "I")],
}


def deth(f):
    """DETH, section 13.2: Q_Key, a reserved byte, the 24-bit source QPN."""
    return struct.pack("!IB", num(f, "deth.qkey"), 0) + num(f, "deth.src_qpn").to_bytes(3, "big")



def cmh(f):
    """CMH, section 12.2: 40 bytes; the 24-bit QPN and the packed retry byte
    do not fit EXT_LAYOUT's one-field-per-format rows."""
    c = lambda k: num(f, "cm." + k)
    out = struct.pack("!IIQB", c("local_comm_id"), c("remote_comm_id"), c("service_id"),
                      c("qp_type"))
    out += c("qpn").to_bytes(3, "big")
    retry = c("retry_count") & 7 | (c("rnr_retry") & 7) << 3 | (0x40 if c("srq") else 0)
    out += struct.pack("!IIHBBBBBBHBx", c("start_psn"), c("qkey"), c("src_port"),
                       c("responder_resources"), c("initiator_depth"), c("cm_timeout") & 0x1F,
                       c("max_cm_retries") & 0xF, c("path_mtu") & 0xF, retry, c("reason"),
                       c("message"))
    assert len(out) == 40
    return out


EXT_ENCODERS = {"CMH": cmh, "DETH": deth}


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def read_vector(path):
    fields, order, frame_hex, in_frame = {}, [], [], False
    for line in open(path):
        line = line.rstrip("\n")
        if in_frame:
            frame_hex.append(line)
            continue
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "frame":
            in_frame = True
            continue
        fields[key] = value
        order.append(key)
    return fields, bytes.fromhex("".join(frame_hex))


def num(fields, key, default=0):
    v = fields.get(key)
    if v is None:
        return default
    if key == "nack.reason":
        return NACK_REASONS[v]
    return int(v, 0)


def transport(f):
    op, exts, payload_ok = OPCODES[f["mbth.opcode"]]
    out = struct.pack("!BBHB", num(f, "mbth.version", 1) << 4, op, num(f, "mbth.flags"),
                      num(f, "mbth.path_id"))
    out += num(f, "mbth.dest_qpn").to_bytes(3, "big")
    out += struct.pack("!IIII", num(f, "mbth.psn"), num(f, "mbth.msn"), num(f, "mbth.offset"),
                       num(f, "mbth.timestamp"))
    for ext in exts:
        if ext in EXT_ENCODERS:
            out += EXT_ENCODERS[ext](f)
            continue
        for key, fmt in EXT_LAYOUT[ext]:
            out += struct.pack("!" + fmt) if key is None else struct.pack("!" + fmt, num(f, key))
    payload = bytes.fromhex(f.get("payload", ""))
    assert payload_ok or not payload, "payload on " + f["mbth.opcode"]
    assert len(payload) <= CM_MAX_PRIVATE.get(f["mbth.opcode"], len(payload)), "private data too long"
    out += payload
    return out + struct.pack("!I", crc32c(out))


def frame(f):
    tp = transport(f)
    src, dst = ipaddress.ip_address(f["ip.src"]), ipaddress.ip_address(f["ip.dst"])
    tos = num(f, "ip.dscp") << 2 | num(f, "ip.ecn")
    udp_len = 8 + len(tp)
    eth = bytes.fromhex(f["eth.dst"].replace(":", "")) + bytes.fromhex(f["eth.src"].replace(":", ""))
    if src.version == 4:
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, 20 + udp_len, 0, 0x4000, num(f, "ip.ttl"), 17,
                         0, src.packed, dst.packed)
        ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
        udp = struct.pack("!HHHH", num(f, "udp.src_port"), UDP_PORT, udp_len, 0)
        return eth + b"\x08\x00" + ip + udp + tp
    ip = struct.pack("!IHBB16s16s", 6 << 28 | tos << 20, udp_len, 17, num(f, "ip.ttl"), src.packed,
                     dst.packed)
    pseudo = src.packed + dst.packed + struct.pack("!IxxxB", udp_len, 17)
    udp = struct.pack("!HHHH", num(f, "udp.src_port"), UDP_PORT, udp_len, 0)
    c = csum(pseudo + udp + tp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", c)
    return eth + b"\x86\xdd" + ip + udp + tp


def hex_lines(b):
    return [" ".join("%02x" % x for x in b[o:o + 16]) for o in range(0, len(b), 16)]


def rewrite(path, data, fields):
    text = open(path).read()
    head = text[:text.index("\nframe:")] if "\nframe:" in text else text.rstrip("\n")
    lines = [l for l in head.split("\n") if not l.startswith("icrc:")]
    lines.append("icrc: 0x%08x" % struct.unpack("!I", data[-4:])[0])
    new = "\n".join(lines) + "\nframe:\n" + "\n".join(hex_lines(data)) + "\n"
    if new != text:
        open(path, "w").write(new)
        return True
    return False


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    check = "--check" in argv
    corpus = argv[argv.index("--corpus") + 1] if "--corpus" in argv else None
    stale = 0
    names = sorted(n for n in os.listdir(here) if n.endswith(".txt"))
    for name in names:
        path = os.path.join(here, name)
        fields, old = read_vector(path)
        data = frame(fields)
        if check:
            if data != old:
                print("stale: " + name)
                stale += 1
        elif rewrite(path, data, fields):
            print("wrote " + name)
        if corpus:
            os.makedirs(corpus, exist_ok=True)
            base = os.path.join(corpus, name[:-4])
            open(base + ".frame", "wb").write(data)
            open(base + ".udp", "wb").write(transport(fields))
            # one 802.1Q tag and a trailing FCS-sized tail: both must be tolerated
            open(base + ".vlan", "wb").write(data[:12] + b"\x81\x00\x20\x05" + data[12:] + b"\0" * 4)
    print("%d vectors%s" % (len(names), ", %d stale" % stale if check else ""))
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
