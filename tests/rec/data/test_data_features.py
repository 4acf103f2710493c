"""Item features: the four readers, alignment to internal ids, hashing, and clear errors."""

from pathlib import Path

import numpy as np
import pytest

from attnsvm.rec.data.errors import DataFormatError
from attnsvm.rec.data.features import (
    align_features,
    find_feature_file,
    hashed_tokens,
    load_item_features,
    read_item_features,
    token_id,
)
from attnsvm.rec.data.titles import find_titles, read_titles

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"
U_ITEM_FLAGS = "|".join(["0"] * 19)


def write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def test_movies_dat_reads_titles_and_genres_in_iso_8859_1(tmp_path):
    text = "1::Toy Story (1995)::Animation|Comedy\n\n73::Misérables, Les (1995)::Drama\n"
    features = read_item_features(write(tmp_path, "movies.dat", text.encode("iso-8859-1")))
    assert features.fields == ("title", "genres")
    assert features.items["73"] == ("Misérables, Les (1995)", "Drama")
    assert features.items["1"][1] == "Animation | Comedy"
    utf8 = read_item_features(write(tmp_path / "..", "movies.dat", text.encode()))
    assert utf8.items["73"][0] == "Misérables, Les (1995)"  # a UTF-8 copy reads the same


def test_u_item_reads_the_genre_flags(tmp_path):
    flags = ["0"] * 19
    flags[1] = flags[5] = "1"  # Action, Comedy
    line = f"2|GoldenEye (1995)|01-Jan-1995||http://x|{'|'.join(flags)}\n"
    features = read_item_features(write(tmp_path, "u.item", line))
    assert features.items["2"] == ("GoldenEye (1995)", "Action | Comedy")


def test_movies_csv_reads_quoted_titles_and_no_genres(tmp_path):
    text = (
        "movieId,title,genres\n"
        '29,"City of Lost Children, The (1995)",Adventure|Drama\n'
        "5,Nothing (2000),(no genres listed)\n"
    )
    features = read_item_features(write(tmp_path, "movies.csv", text))
    assert features.items["29"] == ("City of Lost Children, The (1995)", "Adventure | Drama")
    assert features.items["5"] == ("Nothing (2000)", "")


def test_item2attributes_reads_attribute_ids(tmp_path):
    path = write(tmp_path, "Beauty_item2attributes.json", '{"4": [1, 2, 3], "83": []}')
    features = read_item_features(path)
    assert features.fields == ("attributes",)
    assert features.items == {"4": ("1 2 3",), "83": ("",)}


JSON = "X_item2attributes.json"
BAD_FILES = [
    ("movies.dat", "1::A::Drama\n2::B::Drama\n1::C::Drama\n", r"dat:3: item '1' appears twice"),
    ("movies.dat", "1::A::Drama\nbroken line\n", r"movies\.dat:2: expected 'id::title::"),
    ("u.item", f"1|A|d||u|{U_ITEM_FLAGS}\n1|B|d||u|{U_ITEM_FLAGS}\n", r"item:2: item '1' appears"),
    ("u.item", "1|A|d||u|0|2\n", r"u\.item:1: expected 'id\|title"),
    ("movies.csv", "movieId,title,genres\n7,A,Drama\n7,B,Drama\n", r"csv:3: item '7' appears"),
    ("movies.csv", "id,name,genres\n7,A,Drama\n", r"movies\.csv:1: expected the header"),
    ("movies.csv", b"movieId,title,genres\n42,Caf\xe9,Drama\n", r"csv:2: item '42': the title is"),
    (JSON, '{"4": [1],\n "5": [2],\n "4": [3]}', r"attributes\.json: item '4' appears twice"),
    (JSON, '{"4": [1],\n "5": [2,}', r"attributes\.json:2: is not valid JSON"),
    (JSON, '{"4": [1], "5": "red"}', r"item '5': expected a list of attribute ids"),
    (JSON, "[[1, 2]]", r"expected a JSON object of item id"),
    (JSON, b'{"4": [1],\n "\xff": [2]}', r"attributes\.json:2: is not valid UTF-8"),
    (JSON, "", r"is empty"),
    ("titles.txt", "1\tA\n", r"is not an item feature file"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD_FILES)
def test_bad_feature_files_name_the_file_line_and_item(tmp_path, name, content, message):
    path = write(tmp_path, name, content)
    with pytest.raises(DataFormatError, match=message):
        read_item_features(path)


def test_alignment_follows_internal_ids_and_names_missing_items(tmp_path):
    path = write(tmp_path, "movies.dat", "5::Five::Drama\n9::Nine::Comedy\n")
    features = read_item_features(path)
    aligned = align_features(features, np.array([0, 9, 5]))
    assert aligned.texts == [("", ""), ("Nine", "Comedy"), ("Five", "Drama")]
    missing = np.array([0, 9, 5, 12, 13, 14, 15, 16, 17])
    message = r"movies\.dat: has no features for item '12', '13', '14', '15', '16' and 1 more"
    with pytest.raises(DataFormatError, match=message + r" \(6 of the catalogue's 8 items\)"):
        align_features(features, missing)


def test_load_item_features_reads_the_file_beside_a_dataset_file(tmp_path):
    data = write(tmp_path, "walks.txt", "1 9 5 9\n2 5 5\n")
    write(tmp_path, "movies.dat", "5::Five (1990)::Drama\n9::Nine::Comedy|Drama\n1::One::Drama\n")
    features = load_item_features(str(data))
    assert features.texts[1:] == [("Five (1990)", "Drama"), ("Nine", "Comedy | Drama")]
    assert find_feature_file(str(data)) == tmp_path / "movies.dat"
    bare = tmp_path / "bare"
    bare.mkdir()
    data = write(bare, "walks.txt", "1 9 5 9\n")
    with pytest.raises(DataFormatError, match="has no item feature file"):
        load_item_features(str(data))


def test_hashed_tokens_are_stable_per_field_and_pad_with_zero(tmp_path):
    path = write(tmp_path, "movies.dat", "5::Drama Drama Queen (1990)::Drama\n")
    features = align_features(read_item_features(path), np.array([0, 5]))
    tokens = hashed_tokens(features, 1000, 3)
    assert tokens.shape == (2, 2, 3) and (tokens[0] == 0).all()
    drama = token_id("title", "drama", 1000)
    assert tokens[1, 0].tolist() == [drama, drama, token_id("title", "queen", 1000)]
    assert tokens[1, 1].tolist() == [token_id("genres", "drama", 1000), 0, 0]
    assert token_id("genres", "drama", 1000) != drama
    # a pre-trained model's token table depends on these ids: they must never change
    assert token_id("title", "toy", 16384) == 15022


def test_titles_read_every_movielens_file(tmp_path):
    path = write(tmp_path, "movies.csv", 'movieId,title,genres\n29,"Lost, The",Drama\n')
    assert read_titles(path) == {"29": "Lost, The"}
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    write(folder, "u.item", f"1|Toy Story (1995)|d||u|{U_ITEM_FLAGS}\n")
    assert find_titles("ml-100k", tmp_path) == folder / "u.item"
    assert read_titles(folder / "u.item") == {"1": "Toy Story (1995)"}


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared datasets are not on this machine")
@pytest.mark.parametrize(
    ("dataset", "items", "fields"),
    [("ml-100k", 1682, 2), ("ml-latest-small", 9724, 2), ("beauty", 12101, 1)],
)
def test_every_item_of_the_real_datasets_has_features(dataset, items, fields):
    features = load_item_features(dataset, SHARED)
    assert len(features.texts) == items + 1 and len(features.fields) == fields
    tokens = hashed_tokens(features, 16384, 16)
    assert (tokens[1:] > 0).any(axis=(1, 2)).all()  # every item has at least one token
