"""The dataset catalog: what each named dataset is, and nothing that touches a file.

Owns ``SourceFile`` (an accepted raw file, its reader and sha256), ``DatasetSpec`` (where a
dataset comes from, which files are accepted, its standard preprocessing and terms), the
``DATASETS`` registry and ``spec``, its lookup. Finding and reading the raw files is
``sources``'; downloading, preparing and loading is ``datasets``'.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnsvm.errors import UnknownName, shown
from attnsvm.rec.data import readers
from attnsvm.rec.data.interactions import Interactions
from attnsvm.rec.data.srgnn import read_srgnn_pickle

Reader = Callable[[str | Path, bytes | None], Interactions]
# The readers of layouts with a time column: their tables keep event times (time-aware models,
# temporal splits); the per-user, pair and session-line layouts have only the order.
TIMED_READERS: frozenset[Reader] = frozenset(
    {
        readers.read_movielens_dat,
        readers.read_movielens_udata,
        readers.read_movielens_csv,
        readers.read_session_tsv,
    }
)


@dataclass(frozen=True)
class SourceFile:
    """One accepted raw file: its name, reader and, where known, the sha256 of its bytes."""

    name: str
    reader: Reader
    sha256: str | None = None

    @property
    def timed(self) -> bool:
        """Whether the table read from this file keeps event times."""
        return self.reader in TIMED_READERS


@dataclass(frozen=True)
class DatasetSpec:
    """A named dataset: its accepted raw files, standard preprocessing, download and terms."""

    name: str
    description: str
    files: tuple[SourceFile, ...]  # accepted raw files, in order of preference
    preprocess: Callable[[Interactions], Interactions]
    preprocessing: str  # the standard preprocessing in words (what `data list` shows)
    # official download, verified by ``checksum``; only a zip may go without one (GroupLens
    # publishes none for its development releases): its CRC-32 per member catches a damaged
    # download as the sha256 would (a test holds the registry to this)
    url: str | None = None
    checksum: str | None = None  # "md5:<hex>" or "sha256:<hex>" of the download, if published
    folders: tuple[str, ...] = ()  # folder names to look for under a ``root`` of raw data
    terms: str = ""
    generate: Callable[[], Interactions] | None = None  # built-in data: made, not read
    # the dataset's own test sessions, in order of preference (``data.split = "predefined"``,
    # ``attnsvm.rec.data.sessions``); found like ``files``, in the same folders
    test_files: tuple[SourceFile, ...] = ()


def _none(data: Interactions) -> Interactions:
    return data


def _five_core_one_pass(data: Interactions) -> Interactions:
    return data.k_core(5, 5, iterative=False)


def _grouplens_selection(data: Interactions) -> Interactions:
    return data.filter_min_length(20)


_GROUPLENS_TERMS = "GroupLens terms: research use, no redistribution, cite Harper & Konstan 2015"
_AMAZON = "McAuley/UCSD Amazon 2014: research use, cite McAuley et al. 2015"
_S3REC = "https://raw.githubusercontent.com/RUCAIBox/CIKM2020-S3Rec/2a81540ae18615d88ef88227b0c066e5b74781e5/data/"
_SESSION_REC = "https://raw.githubusercontent.com/rn5l/session-rec/5dcd583cbd8d44703a5248b9a308945f24b91390/data/rsc15/prepared/"
_S3REC_PREP = "none: the file is already the S3-Rec 5-core (iterative 5-core is a no-op on it)"


def _grouplens(
    name: str,
    description: str,
    files: tuple[SourceFile, ...],
    preprocess: Callable[[Interactions], Interactions],
    preprocessing: str,
    checksum: str | None = None,
) -> DatasetSpec:
    """A MovieLens release: GroupLens' zip of the same name, unpacked into a folder of it."""
    return DatasetSpec(
        name=name,
        description=description,
        files=files,
        preprocess=preprocess,
        preprocessing=preprocessing,
        url=f"https://files.grouplens.org/datasets/movielens/{name}.zip",
        checksum=checksum,
        folders=(name,),
        terms=_GROUPLENS_TERMS,
    )


def _as_published(
    name: str,
    description: str,
    file: SourceFile,
    preprocessing: str,
    folders: tuple[str, ...],
    terms: str,
    url: str | None = None,
    test_files: tuple[SourceFile, ...] = (),
    alternatives: tuple[SourceFile, ...] = (),
) -> DatasetSpec:
    """One file, already preprocessed where it is published, read as is. The download is that
    file itself, so its registered sha256 is also the download's checksum. ``alternatives``:
    other accepted forms of the same data, read where ``file`` is absent."""
    return DatasetSpec(
        name=name,
        description=description,
        files=(file, *alternatives),
        preprocess=_none,
        preprocessing=preprocessing,
        url=url,
        checksum=f"sha256:{file.sha256}" if url and file.sha256 else None,
        folders=folders,
        terms=terms,
        test_files=test_files,
    )


def _s3rec(
    name: str,
    file: str,
    sha256: str | None,
    description: str,
    folder: str,
    terms: str = _AMAZON,
    url: bool = True,
) -> DatasetSpec:
    """A per-user file of the S3-Rec repository (pinned commit), already its 5-core."""
    return _as_published(
        name,
        description,
        SourceFile(file, readers.read_per_user, sha256),
        _S3REC_PREP,
        folders=(folder, name),
        terms=terms,
        url=_S3REC + file if url else None,
    )


def _synthetic() -> Interactions:
    # imported here: the planted-data generator is not needed to read any real dataset
    from attnsvm.rec.data.synthetic import builtin_planted

    return builtin_planted()[0]


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec(
            name="synthetic",
            description="planted trigger → target sequences (make_planted defaults: 2,000 "
            "users, 300 items, length 20, 20 triggers); built in, nothing to download",
            files=(),
            preprocess=_none,
            preprocessing="none",
            generate=_synthetic,
            terms="generated by attnsvm",
        ),
        _grouplens(
            "ml-1m",
            "MovieLens 1M, SASRec/BERT4Rec version",
            (
                SourceFile("ratings.dat", readers.read_movielens_dat),
                SourceFile(
                    "ml-1m_seq_origids.txt",
                    readers.read_per_user,
                    "3b3803d72c034929ada18b2cbd114296261c012b7a3e10282543adeceba53fb1",
                ),
            ),
            _five_core_one_pass,
            "every rating is an interaction; users and items with < 5 interactions removed "
            "in one pass (SASRec): 6,040 / 3,416 / 999,611",
            checksum="md5:c4d9eecfca2ab87c1945afe126590906",
        ),
        _grouplens(
            "ml-100k",
            "MovieLens 100K",
            (
                SourceFile(
                    "u.data",
                    readers.read_movielens_udata,
                    "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
                ),
            ),
            _grouplens_selection,
            "every rating is an interaction; users with < 20 ratings removed "
            "(GroupLens' own selection rule, a no-op on the official file)",
            checksum="md5:0e33842e24a9c977be4e0107933c0723",
        ),
        _grouplens(
            "ml-latest-small",
            "MovieLens latest-small (the 2018 release: 610 users, 100,836 ratings)",
            (SourceFile("ratings.csv", readers.read_movielens_csv),),
            _grouplens_selection,
            "every rating is an interaction; users with < 20 ratings removed "
            "(GroupLens' own selection rule)",
        ),
        _grouplens(
            "ml-20m",
            "MovieLens 20M, BERT4Rec version",
            (SourceFile("ratings.csv", readers.read_movielens_csv),),
            _five_core_one_pass,
            "every rating is an interaction; users and items with < 5 interactions removed "
            "in one pass",
            checksum="md5:cd245b17a1ae2cc31bb14903e1204af3",
        ),
        _s3rec(
            "beauty",
            "Beauty.txt",
            "226cce9c3105299ca0db9615d7d3fb32b3175e90da43100ae352599f0f0107b8",
            "Amazon Beauty, S3-Rec 5-core version (22,363 / 12,101 / 198,502)",
            "amazon-beauty",
        ),
        _s3rec(
            "sports",
            "Sports_and_Outdoors.txt",
            "2a095e0648872beb9982408958290f5d655db5be2911c3756b5446de9f0b8de2",
            "Amazon Sports and Outdoors, S3-Rec 5-core version",
            "amazon-sports",
        ),
        _s3rec(
            "toys",
            "Toys_and_Games.txt",
            "176c680c688d497598c4a89a03b402c0fe78d795e5db335c2e78dd5f2d778a3f",
            "Amazon Toys and Games, S3-Rec 5-core version",
            "amazon-toys",
        ),
        _s3rec(
            "lastfm",
            "LastFM.txt",
            "9ded486adb5b0fe9dc761950afa0a9a05e93ff018992e0c52bf11afec529f802",
            "LastFM (HetRec 2011 tag events), S3-Rec version",
            "lastfm",
            terms="HetRec 2011 / Last.fm: non-commercial research use",
        ),
        _s3rec(
            "yelp",
            "Yelp.txt",
            None,
            "Yelp, S3-Rec/FMLP-Rec per-user version (no stable public URL known: "
            "prepare from a local copy)",
            "yelp",
            terms="Yelp dataset terms",
            url=False,
        ),
        _as_published(
            "steam",
            "Steam, SASRec pairs version (SASRec's repository has it on an unpinned branch "
            "and no checksum is known, so there is no download: prepare from a local copy)",
            SourceFile("Steam.txt", readers.read_pairs),
            "none: SASRec's file is already filtered",
            folders=("steam",),
            terms="Kang & McAuley 2018: research use",
        ),
        _as_published(
            "diginetica",
            "Diginetica (CIKM Cup 2016), SR-GNN sessions as text, one session per line (its test "
            "sessions too, for data.split = predefined) "
            "(the CIKM Cup download needs a login, so no URL)",
            SourceFile(
                "diginetica_train_sessions.txt",
                readers.read_session_lines,
                "d58e465fdacfe2592b414228a771ec4aa5c43c968c61bb25d2a7cc1d2de8c146",
            ),
            "none: SR-GNN preprocessing already applied",
            folders=("diginetica",),
            terms="CIKM Cup 2016: research use",
            alternatives=(
                SourceFile(
                    "all_train_seq.txt",
                    read_srgnn_pickle,
                    "55694865221c682aaa9df6cd5a4ddccff5de902334df5605c5767ee464e11365",
                ),
            ),
            test_files=(
                SourceFile(
                    "diginetica_test_sessions.txt",
                    readers.read_session_lines,
                    "c676af9175f6f4f4484f92e26feb8f8fbe7eea950c128968b01ceddc3f51034e",
                ),
                SourceFile(
                    "test.txt",
                    read_srgnn_pickle,
                    "b2b81f9cb22feb2174feeb3e678b9de5e41ff1653bf23cdaf9046e5404f002ff",
                ),
            ),
        ),
        _as_published(
            "yoochoose",
            "YOOCHOOSE (RecSys Challenge 2015) clicks as session-rec's prepared TSV (the "
            "registered URL is its 100k-click sample)",
            SourceFile(
                "yoochoose-clicks-100k_train_full.txt",
                readers.read_session_tsv,
                "9842c90358298ee784fcf0c9dccb2eeb283ab04368e53bdeee896747f4c03e1e",
            ),
            "none: session-rec preprocessing already applied",
            folders=("yoochoose-100k", "yoochoose"),
            terms="RecSys Challenge 2015: research use",
            url=_SESSION_REC + "yoochoose-clicks-100k_train_full.txt",
            test_files=(
                SourceFile(
                    "yoochoose-clicks-100k_test.txt",
                    readers.read_session_tsv,
                    "380410c606403531019e1ec0b4d192ef90492d594b9b5a91633b860618dd7136",
                ),
            ),
        ),
    )
}


def spec(name: str) -> DatasetSpec:
    """The registered dataset ``name``; a KeyError listing the known names otherwise."""
    try:
        return DATASETS[name]
    except KeyError:
        known = ", ".join(DATASETS)
        raise UnknownName(f"unknown dataset {shown(name)}; known: {known}") from None
