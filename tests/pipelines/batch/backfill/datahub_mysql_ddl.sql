-- metadata_aspect_v2 as DataHub creates it on MySQL / MariaDB: the CREATE TABLE statement of
-- github.com/datahub-project/datahub docker/mysql-setup/init.sql (commit df9e07fda24b87bf1e64e637566af7b7d5d70a0b).
create table if not exists metadata_aspect_v2 (
  urn                           varchar(500) not null,
  aspect                        varchar(200) not null,
  version                       bigint(20) not null,
  metadata                      longtext not null,
  systemmetadata                longtext,
  createdon                     datetime(6) not null,
  createdby                     varchar(255) not null,
  createdfor                    varchar(255),
  constraint pk_metadata_aspect_v2 primary key (urn,aspect,version)
);
