-- metadata_aspect_v2 as DataHub creates it on PostgreSQL: the CREATE TABLE statement of
-- github.com/datahub-project/datahub docker/postgres-setup/init.sql (commit fb13cdf513f92354031c53380d406fee0b0c18b0).
CREATE TABLE IF NOT EXISTS metadata_aspect_v2 (
  urn                           varchar(500) not null,
  aspect                        varchar(200) not null,
  version                       bigint not null,
  metadata                      text not null,
  systemmetadata                text,
  createdon                     timestamp not null,
  createdby                     varchar(255) not null,
  createdfor                    varchar(255),
  CONSTRAINT pk_metadata_aspect_v2 PRIMARY KEY (urn, aspect, version)
);
