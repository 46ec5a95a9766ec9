"""RPC messages declared by their fields survive DGL's own serialisation, tensors as payloads."""
import pickle

import pytest
import torch
from dgl.distributed import rpc

from dgl_sni.halo import id_sets
from dgl_sni.sni import notices


def _through_dgl(message):
    data, tensors = rpc.serialize_to_payload(message)
    return rpc.deserialize_from_payload(type(message), data, tensors), tensors


def test_fields_travel_in_order_with_tensors_as_payloads():
    ids = torch.arange(5)
    got, tensors = _through_dgl(id_sets.RegisterSetRequest("h1", 3, "halo", ids))
    assert (got.name, got.rank, got.key) == ("h1", 3, "halo")
    assert len(tensors) == 1 and tensors[0] is ids  # sent as a tensor, not pickled
    assert torch.equal(got.ids, ids)


def test_defaults_and_every_field_come_back():
    got, _ = _through_dgl(id_sets.AwaitPushesRequest("g1", "halo", rounds=4, rank=2))
    assert (got.name, got.key, got.rounds, got.rank, got.group) == ("g1", "halo", 4, 2, 0)
    got, _ = _through_dgl(id_sets.PullSetRequest("h1", 1, "halo", after=7, group=3))
    assert (got.after, got.group) == (7, 3)


def test_one_field_and_no_field_messages():
    rows = torch.ones(2, 3)
    got, tensors = _through_dgl(id_sets.SetRowsResponse(rows))
    assert tensors[0] is rows and torch.equal(got.rows, rows)
    got, _ = _through_dgl(notices.FetchNoticesRequest(12))
    assert got.since == 12
    got, tensors = _through_dgl(id_sets.SetAck())
    assert isinstance(got, id_sets.SetAck) and tensors == []


def test_pickle_round_trip_matches_dgl():
    sent = notices.NoticeResponse(2, [("h1", None, 0)], "/dev/shm/x")
    got = pickle.loads(pickle.dumps(sent))
    assert (got.count, got.notices, got.path) == (2, [("h1", None, 0)], "/dev/shm/x")
    got = pickle.loads(pickle.dumps(notices.FetchNoticesRequest(5)))
    assert got.since == 5


def test_bad_states_are_named():
    with pytest.raises(TypeError, match="FetchNoticesRequest.since"):
        rpc.serialize_to_payload(notices.FetchNoticesRequest((1, 2)))
    msg = id_sets.PublishedRequest.__new__(id_sets.PublishedRequest)
    with pytest.raises(ValueError, match="PublishedRequest takes 4 fields"):
        msg.__setstate__(("h1", 0))
