-- Wireshark dissector for the MetaRoCE wire protocol v1 (UDP port 4796).
-- Normative spec: docs/protocol.md. Field layout: proto/packet.h.
--
--   tshark -X lua_script:tools/wireshark/metaroce.lua -r capture.pcap -V
--   wireshark -X lua_script:tools/wireshark/metaroce.lua capture.pcap
-- or copy it to ~/.local/lib/wireshark/plugins/.
--
-- The opcode table below mirrors kOpcodeTable in proto/opcode.h (adding an
-- opcode: see the checklist there). tests/wireshark/ runs this dissector
-- over every golden vector and checks names and values.

local UDP_PORT = 4796
local MBTH_LEN = 24
local ICRC_LEN = 4

local p = Proto("metaroce", "MetaRoCE")

-- name, extension headers in wire order, payload allowed
local OPCODES = {
  [0x01] = { "SEND", { "SETH" }, true },
  [0x02] = { "SEND_IMM", { "SETH", "IMM" }, true },
  [0x03] = { "RDMA_WRITE", { "RETH" }, true },
  [0x04] = { "RDMA_WRITE_IMM", { "RETH", "IMM" }, true },
  [0x05] = { "RDMA_READ_REQ", { "RETH" }, false },
  [0x06] = { "RDMA_READ_RESP", {}, true },
  [0x07] = { "ATOMIC_CMP_SWAP", { "AtomicETH" }, false },
  [0x08] = { "ATOMIC_FETCH_ADD", { "AtomicETH" }, false },
  [0x09] = { "ATOMIC_RESP", { "AtomicAckETH" }, false },
  -- memory windows (docs/protocol.md §15): SEND that invalidates the responder's rkey
  [0x0A] = { "SEND_INV", { "SETH", "IETH" }, true },
  [0x10] = { "ACK", { "ACKH" }, false },
  [0x11] = { "NACK", { "NACKH" }, false },
  [0x12] = { "PROBE", { "PROBEH" }, false },
  [0x13] = { "PROBE_REPLY", { "PROBEH" }, false },
  -- connection management (docs/protocol.md §12): private data as payload
  [0x18] = { "CM_REQ", { "CMH" }, true },
  [0x19] = { "CM_MRA", { "CMH" }, true },
  [0x1A] = { "CM_REJ", { "CMH" }, true },
  [0x1B] = { "CM_REP", { "CMH" }, true },
  [0x1C] = { "CM_RTU", { "CMH" }, true },
  [0x1D] = { "CM_DREQ", { "CMH" }, true },
  [0x1E] = { "CM_DREP", { "CMH" }, true },
  -- datagram service (docs/protocol.md §13): one packet per message
  [0x20] = { "UD_SEND", { "DETH" }, true },
  [0x21] = { "UD_SEND_IMM", { "DETH", "IMM" }, true },
  -- unreliable connected service (docs/protocol.md §14): RC's request layouts
  [0x24] = { "UC_SEND", { "SETH" }, true },
  [0x25] = { "UC_SEND_IMM", { "SETH", "IMM" }, true },
  [0x26] = { "UC_RDMA_WRITE", { "RETH" }, true },
  [0x27] = { "UC_RDMA_WRITE_IMM", { "RETH", "IMM" }, true },
}
-- CM private data limits (§12.4); more is malformed.
local CM_MAX_PRIVATE = { [0x18] = 92, [0x19] = 222, [0x1A] = 148, [0x1B] = 196, [0x1C] = 224,
                         [0x1D] = 220, [0x1E] = 224 }
local opcode_names = {}
for v, row in pairs(OPCODES) do opcode_names[v] = row[1] end

local nack_reasons = {
  [1] = "RNR", [2] = "REMOTE_ACCESS_ERROR", [3] = "INVALID_REQUEST",
  [4] = "REMOTE_OPERATION_ERROR", [5] = "SEQUENCE_ERROR", [6] = "TRIMMED",
}

-- IB CM reject reasons (proto/cm.h RejReason), CMH message values, QP types.
local rej_reasons = {
  [1] = "NO_QP", [3] = "NO_RESOURCES", [4] = "TIMEOUT", [6] = "INVALID_COMM_ID",
  [8] = "INVALID_SERVICE_ID", [9] = "INVALID_TRANSPORT_TYPE", [10] = "STALE_CONN",
  [26] = "INVALID_MTU", [28] = "CONSUMER_DEFINED",
}
local cm_messages = { [0] = "REQ", [1] = "REP", [2] = "OTHER" }
local qp_types = { [2] = "RC", [4] = "UD" }
local port_spaces = { [0x0002] = "IPOIB", [0x0106] = "TCP", [0x0111] = "UDP", [0x013F] = "IB" }

local f = {
  -- MBTH (§3.1)
  version = ProtoField.uint8("metaroce.mbth.version", "Version", base.DEC, nil, 0xF0),
  mbth_rsvd = ProtoField.uint8("metaroce.mbth.reserved", "Reserved", base.HEX, nil, 0x0F),
  opcode = ProtoField.uint8("metaroce.mbth.opcode", "Opcode", base.HEX, opcode_names),
  flags = ProtoField.uint16("metaroce.mbth.flags", "Flags", base.HEX),
  flag_se = ProtoField.bool("metaroce.mbth.flags.se", "Solicited event (SE)", 16, nil, 0x0001),
  flag_ackreq = ProtoField.bool("metaroce.mbth.flags.ack_req", "ACK requested", 16, nil, 0x0002),
  flag_retx = ProtoField.bool("metaroce.mbth.flags.retransmit", "Retransmission", 16, nil, 0x0004),
  flag_last = ProtoField.bool("metaroce.mbth.flags.last", "Last packet of message", 16, nil, 0x0008),
  path_id = ProtoField.uint8("metaroce.mbth.path_id", "Path ID", base.DEC),
  dest_qpn = ProtoField.uint24("metaroce.mbth.dest_qpn", "Destination QP", base.HEX),
  psn = ProtoField.uint32("metaroce.mbth.psn", "PSN", base.DEC),
  msn = ProtoField.uint32("metaroce.mbth.msn", "MSN", base.DEC),
  offset = ProtoField.uint32("metaroce.mbth.offset", "Offset", base.DEC),
  timestamp = ProtoField.uint32("metaroce.mbth.timestamp", "Timestamp", base.DEC),
  -- RETH (§3.2)
  reth_va = ProtoField.uint64("metaroce.reth.va", "Virtual address", base.HEX),
  reth_rkey = ProtoField.uint32("metaroce.reth.rkey", "R_Key", base.HEX),
  reth_length = ProtoField.uint32("metaroce.reth.length", "DMA length", base.DEC),
  -- SETH (§3.3), IMM (§3.4)
  seth_length = ProtoField.uint32("metaroce.seth.length", "Message length", base.DEC),
  imm = ProtoField.uint32("metaroce.imm", "Immediate data", base.HEX),
  -- AtomicETH (§3.5)
  atomic_va = ProtoField.uint64("metaroce.atomiceth.va", "Virtual address", base.HEX),
  atomic_rkey = ProtoField.uint32("metaroce.atomiceth.rkey", "R_Key", base.HEX),
  atomic_swap_add = ProtoField.uint64("metaroce.atomiceth.swap_add", "Swap/add data", base.HEX),
  atomic_compare = ProtoField.uint64("metaroce.atomiceth.compare", "Compare data", base.HEX),
  -- AtomicAckETH (§3.6)
  atomic_original = ProtoField.uint64("metaroce.atomicacketh.original", "Original value", base.HEX),
  -- ACKH (§3.7)
  ack_cum_psn = ProtoField.uint32("metaroce.ackh.cum_psn", "Cumulative PSN", base.DEC),
  ack_sack = ProtoField.uint64("metaroce.ackh.sack", "SACK bitmap", base.HEX),
  ack_sacked = ProtoField.string("metaroce.ackh.sacked_psns", "SACKed PSNs"),
  ack_echo_ts = ProtoField.uint32("metaroce.ackh.echo_ts", "Echoed timestamp", base.DEC),
  ack_credit = ProtoField.uint32("metaroce.ackh.credit", "Credit", base.DEC),
  ack_ce_count = ProtoField.uint16("metaroce.ackh.ce_count", "CE count", base.DEC),
  ack_echo_path = ProtoField.uint8("metaroce.ackh.echo_path", "Echoed path ID", base.DEC),
  ack_flags = ProtoField.uint8("metaroce.ackh.ack_flags", "ACK flags", base.HEX),
  ack_flag_ce = ProtoField.bool("metaroce.ackh.ack_flags.ce", "Triggering packet CE-marked", 8, nil, 0x01),
  ack_flag_dup = ProtoField.bool("metaroce.ackh.ack_flags.dup", "Triggering packet was a duplicate", 8, nil, 0x02),
  ack_rcv_msn = ProtoField.uint32("metaroce.ackh.rcv_msn", "Receiver MSN", base.DEC),
  -- NACKH (§3.8)
  nack_reason = ProtoField.uint8("metaroce.nackh.reason", "Reason", base.DEC, nack_reasons),
  nack_rnr_timer = ProtoField.uint8("metaroce.nackh.rnr_timer", "RNR timer", base.DEC, nil, 0x1F),
  nack_rsvd = ProtoField.uint16("metaroce.nackh.reserved", "Reserved", base.HEX),
  nack_psn = ProtoField.uint32("metaroce.nackh.psn", "NACKed PSN", base.DEC),
  -- PROBEH (§3.9)
  probe_nonce = ProtoField.uint32("metaroce.probeh.nonce", "Nonce", base.HEX),
  probe_echo_ts = ProtoField.uint32("metaroce.probeh.echo_ts", "Echoed timestamp", base.DEC),
  -- CMH (§12.2)
  cm_local = ProtoField.uint32("metaroce.cmh.local_comm_id", "Local Comm ID", base.HEX),
  cm_remote = ProtoField.uint32("metaroce.cmh.remote_comm_id", "Remote Comm ID", base.HEX),
  cm_sid = ProtoField.uint64("metaroce.cmh.service_id", "Service ID", base.HEX),
  cm_ps = ProtoField.uint16("metaroce.cmh.port_space", "Port space", base.HEX, port_spaces),
  cm_port = ProtoField.uint16("metaroce.cmh.port", "Port", base.DEC),
  cm_qp_type = ProtoField.uint8("metaroce.cmh.qp_type", "QP type", base.DEC, qp_types),
  cm_qpn = ProtoField.uint24("metaroce.cmh.qpn", "QPN", base.HEX),
  cm_psn = ProtoField.uint32("metaroce.cmh.start_psn", "Starting PSN", base.DEC),
  cm_qkey = ProtoField.uint32("metaroce.cmh.qkey", "Q_Key", base.HEX),
  cm_src_port = ProtoField.uint16("metaroce.cmh.src_port", "Source port", base.DEC),
  cm_resp_res = ProtoField.uint8("metaroce.cmh.responder_resources", "Responder resources", base.DEC),
  cm_init_depth = ProtoField.uint8("metaroce.cmh.initiator_depth", "Initiator depth", base.DEC),
  cm_timeout = ProtoField.uint8("metaroce.cmh.cm_timeout", "CM timeout", base.DEC, nil, 0x1F),
  cm_retries = ProtoField.uint8("metaroce.cmh.max_cm_retries", "Max CM retries", base.DEC, nil, 0x0F),
  cm_mtu = ProtoField.uint8("metaroce.cmh.path_mtu", "Path MTU", base.DEC, nil, 0x0F),
  cm_retry = ProtoField.uint8("metaroce.cmh.retry_count", "Retry count", base.DEC, nil, 0x07),
  cm_rnr = ProtoField.uint8("metaroce.cmh.rnr_retry", "RNR retry count", base.DEC, nil, 0x38),
  cm_srq = ProtoField.bool("metaroce.cmh.srq", "SRQ", 8, nil, 0x40),
  cm_reason = ProtoField.uint16("metaroce.cmh.reason", "Reject reason", base.DEC, rej_reasons),
  cm_message = ProtoField.uint8("metaroce.cmh.message", "Message", base.DEC, cm_messages),
  cm_rsvd = ProtoField.uint8("metaroce.cmh.reserved", "Reserved", base.HEX),
  -- DETH (§13.2)
  deth_qkey = ProtoField.uint32("metaroce.deth.qkey", "Q_Key", base.HEX),
  deth_rsvd = ProtoField.uint8("metaroce.deth.reserved", "Reserved", base.HEX),
  deth_src_qpn = ProtoField.uint24("metaroce.deth.src_qpn", "Source QP", base.HEX),
  -- IETH (§15.2)
  ieth_rkey = ProtoField.uint32("metaroce.ieth.rkey", "Invalidate R_Key", base.HEX),
  -- payload, ICRC (§5)
  payload = ProtoField.bytes("metaroce.payload", "Payload"),
  icrc = ProtoField.uint32("metaroce.icrc", "ICRC", base.HEX),
  icrc_status = ProtoField.string("metaroce.icrc.status", "ICRC status"),
}
local field_list = {}
for _, v in pairs(f) do field_list[#field_list + 1] = v end
p.fields = field_list

local ef_bad_icrc = ProtoExpert.new("metaroce.icrc.bad", "Bad ICRC", expert.group.CHECKSUM, expert.severity.ERROR)
local ef_malformed = ProtoExpert.new("metaroce.malformed", "Malformed MetaRoCE packet", expert.group.MALFORMED, expert.severity.ERROR)
p.experts = { ef_bad_icrc, ef_malformed }

-- CRC32C (Castagnoli), reflected, init/final 0xFFFFFFFF (§5).
local bit = bit32 or bit
local crc_table = {}
for i = 0, 255 do
  local c = i
  for _ = 1, 8 do
    if bit.band(c, 1) == 1 then c = bit.bxor(bit.rshift(c, 1), 0x82F63B78) else c = bit.rshift(c, 1) end
  end
  crc_table[i] = c
end
local function crc32c(bytes, len)
  local c = 0xFFFFFFFF
  for i = 0, len - 1 do
    c = bit.bxor(crc_table[bit.band(bit.bxor(c, bytes:get_index(i)), 0xFF)], bit.rshift(c, 8))
  end
  return bit.band(bit.bnot(c), 0xFFFFFFFF)
end

local function nack_reason_name(v) return nack_reasons[v] or "UNKNOWN" end

-- Each extension header: length and a function adding its fields to a subtree.
local EXTS = {
  RETH = { 16, "RDMA Extended Transport Header", function(t, r)
    t:add(f.reth_va, r(0, 8)); t:add(f.reth_rkey, r(8, 4)); t:add(f.reth_length, r(12, 4))
  end },
  SETH = { 4, "Send Extended Transport Header", function(t, r) t:add(f.seth_length, r(0, 4)) end },
  IMM = { 4, "Immediate Data", function(t, r) t:add(f.imm, r(0, 4)) end },
  AtomicETH = { 28, "Atomic Extended Transport Header", function(t, r)
    t:add(f.atomic_va, r(0, 8)); t:add(f.atomic_rkey, r(8, 4))
    t:add(f.atomic_swap_add, r(12, 8)); t:add(f.atomic_compare, r(20, 8))
  end },
  AtomicAckETH = { 8, "Atomic Acknowledge Extended Transport Header", function(t, r)
    t:add(f.atomic_original, r(0, 8))
  end },
  ACKH = { 28, "Acknowledgement Header", function(t, r)
    local cum = r(0, 4):uint()
    t:add(f.ack_cum_psn, r(0, 4))
    local sack = r(4, 8):uint64()
    t:add(f.ack_sack, r(4, 8))
    local psns = {}
    local hi, lo = r(4, 4):uint(), r(8, 4):uint()
    for i = 0, 63 do
      local set = (i < 32) and bit.band(bit.rshift(lo, i), 1) or bit.band(bit.rshift(hi, i - 32), 1)
      if set == 1 then psns[#psns + 1] = tostring((cum + 1 + i) % 4294967296) end
    end
    if #psns > 0 then t:add(f.ack_sacked, r(4, 8), table.concat(psns, ", ")) end
    t:add(f.ack_echo_ts, r(12, 4)); t:add(f.ack_credit, r(16, 4))
    t:add(f.ack_ce_count, r(20, 2)); t:add(f.ack_echo_path, r(22, 1))
    local fl = t:add(f.ack_flags, r(23, 1)); fl:add(f.ack_flag_ce, r(23, 1)); fl:add(f.ack_flag_dup, r(23, 1))
    t:add(f.ack_rcv_msn, r(24, 4))
    return sack
  end },
  NACKH = { 8, "Negative Acknowledgement Header", function(t, r)
    t:add(f.nack_reason, r(0, 1)); t:add(f.nack_rnr_timer, r(1, 1))
    t:add(f.nack_rsvd, r(2, 2)); t:add(f.nack_psn, r(4, 4))
  end },
  PROBEH = { 8, "Probe Header", function(t, r)
    t:add(f.probe_nonce, r(0, 4)); t:add(f.probe_echo_ts, r(4, 4))
  end },
  IETH = { 4, "Invalidate Extended Transport Header", function(t, r)
    t:add(f.ieth_rkey, r(0, 4))
  end },
  DETH = { 8, "Datagram Extended Transport Header", function(t, r)
    t:add(f.deth_qkey, r(0, 4)); t:add(f.deth_rsvd, r(4, 1)); t:add(f.deth_src_qpn, r(5, 3))
  end },
  CMH = { 40, "Connection Management Header", function(t, r)
    t:add(f.cm_local, r(0, 4)); t:add(f.cm_remote, r(4, 4))
    local sid = t:add(f.cm_sid, r(8, 8))
    sid:add(f.cm_ps, r(12, 2)); sid:add(f.cm_port, r(14, 2))
    t:add(f.cm_qp_type, r(16, 1)); t:add(f.cm_qpn, r(17, 3))
    t:add(f.cm_psn, r(20, 4)); t:add(f.cm_qkey, r(24, 4))
    t:add(f.cm_src_port, r(28, 2)); t:add(f.cm_resp_res, r(30, 1)); t:add(f.cm_init_depth, r(31, 1))
    t:add(f.cm_timeout, r(32, 1)); t:add(f.cm_retries, r(33, 1)); t:add(f.cm_mtu, r(34, 1))
    t:add(f.cm_retry, r(35, 1)); t:add(f.cm_rnr, r(35, 1)); t:add(f.cm_srq, r(35, 1))
    t:add(f.cm_reason, r(36, 2)); t:add(f.cm_message, r(38, 1)); t:add(f.cm_rsvd, r(39, 1))
  end },
}

function p.dissector(tvb, pinfo, tree)
  local len = tvb:len()
  if len < 2 then return 0 end
  pinfo.cols.protocol = "MetaRoCE"
  local root = tree:add(p, tvb(), "MetaRoCE")
  local op = tvb(1, 1):uint()
  local row = OPCODES[op]
  local name = row and row[1] or string.format("UNKNOWN(0x%02x)", op)
  if len < MBTH_LEN then
    root:add_proto_expert_info(ef_malformed, "truncated MBTH")
    pinfo.cols.info = name .. " [truncated]"
    return len
  end

  local m = root:add(p, tvb(0, MBTH_LEN), "MBTH (MetaRoCE Base Transport Header)")
  m:add(f.version, tvb(0, 1)); m:add(f.mbth_rsvd, tvb(0, 1))
  m:add(f.opcode, tvb(1, 1))
  local fl = m:add(f.flags, tvb(2, 2))
  fl:add(f.flag_se, tvb(2, 2)); fl:add(f.flag_ackreq, tvb(2, 2))
  fl:add(f.flag_retx, tvb(2, 2)); fl:add(f.flag_last, tvb(2, 2))
  m:add(f.path_id, tvb(4, 1)); m:add(f.dest_qpn, tvb(5, 3))
  m:add(f.psn, tvb(8, 4)); m:add(f.msn, tvb(12, 4))
  m:add(f.offset, tvb(16, 4)); m:add(f.timestamp, tvb(20, 4))

  local info = string.format("%s QP=0x%06x PSN=%u", name, tvb(5, 3):uint(), tvb(8, 4):uint())
  if bit.rshift(tvb(0, 1):uint(), 4) ~= 1 or not row then
    root:add_proto_expert_info(ef_malformed, row and "unsupported version" or "unknown opcode")
    pinfo.cols.info = info
    return len
  end

  local at = MBTH_LEN
  for _, ext in ipairs(row[2]) do
    local e = EXTS[ext]
    if at + e[1] > len - ICRC_LEN then
      root:add_proto_expert_info(ef_malformed, "truncated " .. ext)
      pinfo.cols.info = info .. " [truncated]"
      return len
    end
    local t = root:add(p, tvb(at, e[1]), ext .. " (" .. e[2] .. ")")
    local base = at
    e[3](t, function(o, n) return tvb(base + o, n) end)
    if ext == "DETH" then info = info .. string.format(" src_qp=0x%06x", tvb(at + 5, 3):uint()) end
    if ext == "ACKH" then info = info .. string.format(" cum=%u", tvb(at, 4):uint()) end
    if ext == "CMH" then
      info = string.format("%s comm=0x%08x->0x%08x", name, tvb(at, 4):uint(), tvb(at + 4, 4):uint())
      if op == 0x18 then
        info = info .. string.format(" port=%u", tvb(at + 14, 2):uint())
      elseif op == 0x1A then
        local reason = tvb(at + 36, 2):uint()
        info = info .. " " .. (rej_reasons[reason] or string.format("reason %u", reason))
      end
    end
    if ext == "NACKH" then
      info = info .. " " .. nack_reason_name(tvb(at, 1):uint()) .. string.format(" psn=%u", tvb(at + 4, 4):uint())
    end
    at = at + e[1]
  end

  local plen = len - ICRC_LEN - at
  if plen > 0 then
    root:add(f.payload, tvb(at, plen))
    if not row[3] then root:add_proto_expert_info(ef_malformed, "payload not allowed for " .. name) end
    if CM_MAX_PRIVATE[op] and plen > CM_MAX_PRIVATE[op] then
      root:add_proto_expert_info(ef_malformed, string.format("private data over %u bytes", CM_MAX_PRIVATE[op]))
    end
    info = info .. string.format(" len=%d", plen)
  end
  if len >= at + ICRC_LEN then
    local wire = tvb(len - ICRC_LEN, 4):uint()
    local want = crc32c(tvb(0, len - ICRC_LEN):bytes(), len - ICRC_LEN)
    local it = root:add(f.icrc, tvb(len - ICRC_LEN, 4))
    if wire == want then
      it:add(f.icrc_status, tvb(len - ICRC_LEN, 4), "Good")
    else
      it:add(f.icrc_status, tvb(len - ICRC_LEN, 4), string.format("Bad (expected 0x%08x)", want))
      it:add_proto_expert_info(ef_bad_icrc)
      info = info .. " [bad ICRC]"
    end
  end
  pinfo.cols.info = info
  return len
end

DissectorTable.get("udp.port"):add(UDP_PORT, p)
